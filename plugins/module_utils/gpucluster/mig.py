# -*- coding: utf-8 -*-
"""MIG on a node: read the GPU instances nvidia-smi reports, bring them to the planned layout,
make the capability device files that hand one instance to a job, and judge the layout.

The planned layout (the plan's gpu_mig_layout_planned, provisioner/mig.py) has one entry per
GPU index: None (MIG off) or the GPU-instance profile names, largest first. A GPU whose
instances already match the plan as a multiset is left alone; any other GPU with MIG on loses
its compute and GPU instances and gets the planned ones (``nvidia-smi mig -cgi ... -C``: each
GPU instance with its default compute instance). GPU and compute instances never survive a
reboot, and from Hopper on neither does MIG mode (A100 keeps the mode in its InfoROM): NVIDIA
MIG user guide, "Getting Started with MIG". The gpuc-mig unit applies the same layout at every
boot, before the persistence daemon and slurmd start. GPU instance ids are the driver's choice
(the guide's own examples give a 3g at slot 4 id 1 in one and 2 in another): they are read from
``nvidia-smi mig -lgi``, never worked out.

A job reaches one MIG device through the GPU's device file plus two capability files, the GPU
instance's and the compute instance's ``access`` (``/dev/nvidia-caps/nvidia-cap<minor>``, the
minors listed in /proc/driver/nvidia-caps/mig-minors, the major the ``nvidia-caps`` line of
/proc/devices); what Slurm's gres.conf ``MultipleFiles=`` lists and its cgroup device rules
grant. The driver does not create those files; NVIDIA's ``nvidia-modprobe -f`` does, from the
same two tables: they are made here from them.

Used by the gpu_mig module, the gpuc-mig program (boot) and gpu_node_facts (validate). Stdlib
only, Python 3.9 syntax: it runs on managed nodes, and gpuc-mig imports it from a plain
directory (no relative import).
"""

from __future__ import annotations

import os
import re
import stat

# A row of `nvidia-smi mig -lgi`: "|   0  MIG 3g.40gb           9        2          4:4     |".
_LGI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")
# A row of `nvidia-smi mig -lci`: "|   0      2       MIG 3g.40gb          2        0   0:3  |".
_LCI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")
_MINOR_LINE = re.compile(r"^(\S+)\s+(\d+)\s*$")
# What nvidia-smi prints (exit 6) when no GPU has an instance to list, or none has MIG on.
_NONE_FOUND = re.compile(r"No (GPU|compute) instances? found|No MIG-enabled devices found", re.I)

# nvidia-smi -mig's warning when the mode waits for a GPU reset, exit 0 ("Warning: MIG mode is
# in pending enable state for GPU 00000000:07:00.0:In use by another client": NVIDIA MIG user
# guide, "Getting Started with MIG").
_PENDING = re.compile(r"MIG mode is in pending (enable|disable) state", re.I)

CAPS_DIR = "/dev/nvidia-caps"


def _rows(text, pattern):
    """The match groups of every line of ``text`` (stripped) that ``pattern`` matches."""
    for line in (text or "").splitlines():
        match = pattern.match(line.strip())
        if match:
            yield match.groups()


def parse_lgi(text):
    """{gpu index: [{name, profile_id, gi, start, size}, ...]} from `nvidia-smi mig -lgi`."""
    out = {}
    for gpu, name, profile_id, gi, start, size in _rows(text, _LGI_ROW):
        out.setdefault(int(gpu), []).append({
            "name": name, "profile_id": int(profile_id), "gi": int(gi),
            "start": int(start), "size": int(size)})
    return out


def parse_lci(text):
    """{(gpu, gi): [ci, ...]} from `nvidia-smi mig -lci`."""
    out = {}
    for groups in _rows(text, _LCI_ROW):
        gpu, gi, _name, _profile_id, ci = groups[:5]
        out.setdefault((int(gpu), int(gi)), []).append(int(ci))
    return out


def parse_mig_minors(text):
    """{"gpu0/gi1/access": 12, ...} from /proc/driver/nvidia-caps/mig-minors."""
    return dict((key, int(minor)) for key, minor in _rows(text, _MINOR_LINE))


def caps_major(proc_devices):
    """The character major of ``nvidia-caps`` in /proc/devices, or None."""
    for line in (proc_devices or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "nvidia-caps" and parts[0].isdigit():
            return int(parts[0])
    return None


def same_layout(measured, planned):
    """Whether the instance names ``measured`` hold the planned ones, order aside."""
    return sorted(measured or []) == sorted(planned or [])


def changes(modes, instances, planned):
    """What to do per GPU: [(index, enable|disable|None, names to create or None)].

    ``modes``: {index: True/False} MIG mode as nvidia-smi reports it; ``instances``: parse_lgi;
    ``planned``: one entry per GPU (None: MIG off)."""
    out = []
    for index, want in enumerate(planned):
        on = modes.get(index)
        names = [i["name"] for i in instances.get(index, [])]
        if want is None:
            if on:
                out.append((index, "disable", None))
            continue
        mode = None if on else "enable"
        if mode or not same_layout(names, want):
            out.append((index, mode, list(want)))
    return out


def _words(text):
    """nvidia-smi's message on one line (its last 300 characters)."""
    return "; ".join(line.strip() for line in (text or "").splitlines() if line.strip())[-300:]


def read_modes(run, nvidia_smi):
    """{index: MIG mode on?} from --query-gpu; raises RuntimeError with nvidia-smi's words."""
    rc, out, err = run([nvidia_smi, "--query-gpu=index,mig.mode.current",
                        "--format=csv,noheader"])
    if rc != 0:
        raise RuntimeError("nvidia-smi --query-gpu failed: %s" % _words(err or out))
    modes = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            modes[int(parts[0])] = parts[1].lower() == "enabled"
    return modes


def read_instances(run, nvidia_smi):
    """parse_lgi of `nvidia-smi mig -lgi`; {} when no GPU has an instance."""
    rc, out, err = run([nvidia_smi, "mig", "-lgi"])
    if rc != 0:
        if _NONE_FOUND.search(out + err):
            return {}
        raise RuntimeError("nvidia-smi mig -lgi failed: %s" % _words(err or out))
    return parse_lgi(out)


def read_layout(run, nvidia_smi, gpu):
    """What validate and gpuc-health judge: {modes: {index: bool}, instances: parse_lgi} of
    the GPUs ``gpu`` (parsed ``nvidia-smi -q -x``) lists, or {error}. ``nvidia-smi mig -lgi``
    is asked only when a GPU has MIG on."""
    if not gpu or gpu.get("error"):
        return {"error": "nvidia-smi -q -x was not read"}
    modes = dict((g["index"], bool(g.get("mig_mode"))) for g in gpu.get("gpus") or [])
    try:
        instances = read_instances(run, nvidia_smi) if any(modes.values()) else {}
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"modes": modes, "instances": instances}


def apply(run, planned, nvidia_smi="nvidia-smi", check=False):
    """Bring the GPUs to ``planned``. ``run(argv) -> (rc, stdout, stderr)``. Returns
    {changed, gpus (the indices changed), instances (parse_lgi after)}; raises RuntimeError
    naming the GPU and nvidia-smi's words on the first failure."""
    modes = read_modes(run, nvidia_smi)
    missing = [i for i in range(len(planned)) if i not in modes]
    if missing:
        raise RuntimeError("the plan has %d GPUs, nvidia-smi lists %d (no GPU %s)"
                           % (len(planned), len(modes), ", ".join(map(str, missing))))
    instances = read_instances(run, nvidia_smi) if any(modes.values()) else {}
    todo = changes(modes, instances, planned)
    if check or not todo:
        return {"changed": bool(todo), "gpus": [t[0] for t in todo], "instances": instances}
    for index, mode, names in todo:
        gpu = str(index)
        steps = []
        if instances.get(index):
            steps += [["mig", "-i", gpu, "-dci"], ["mig", "-i", gpu, "-dgi"]]
        if mode == "disable":
            steps.append(["-i", gpu, "-mig", "0"])
        if mode == "enable":
            steps.append(["-i", gpu, "-mig", "1"])
        if names:
            steps.append(["mig", "-i", gpu, "-cgi", ",".join(names), "-C"])
        for step in steps:
            rc, out, err = run([nvidia_smi] + step)
            if rc != 0:
                raise RuntimeError("GPU %s: nvidia-smi %s failed (exit %d): %s" % (
                    gpu, " ".join(step), rc, _words(err or out)))
            if _PENDING.search(out + err):
                # An A100 in use, or passed through to a VM, takes the mode only after a GPU
                # reset (the guide's "pending enable state"): nvidia-smi exits 0 all the same.
                raise RuntimeError("GPU %s: MIG mode is pending, not set: %s; stop what holds "
                                   "the GPU (nvidia-persistenced, DCGM, jobs) and reset it "
                                   "(nvidia-smi -r -i %s) or reboot, then run again"
                                   % (gpu, _words(out + err), gpu))
    return {"changed": True, "gpus": [t[0] for t in todo],
            "instances": read_instances(run, nvidia_smi)}


def device_files(instances, cis, minors, gpu_device="/dev/nvidia%d"):
    """Per MIG device: {gpu, gi, ci, name, files}. ``files``: the GPU's device file and the GPU
    and compute instances' capability files (gres.conf MultipleFiles, in that order).
    ``cis``: parse_lci; ``minors``: parse_mig_minors. Raises RuntimeError when a minor is not
    listed."""
    out = []
    for gpu in sorted(instances):
        for inst in sorted(instances[gpu], key=lambda i: i["gi"]):
            for ci in sorted(cis.get((gpu, inst["gi"]), [])):
                keys = ["gpu%d/gi%d/access" % (gpu, inst["gi"]),
                        "gpu%d/gi%d/ci%d/access" % (gpu, inst["gi"], ci)]
                absent = [k for k in keys if k not in minors]
                if absent:
                    raise RuntimeError("mig-minors lists no %s" % absent[0])
                out.append({"gpu": gpu, "gi": inst["gi"], "ci": ci, "name": inst["name"],
                            "files": [gpu_device % gpu] + ["%s/nvidia-cap%d" % (CAPS_DIR, minors[k])
                                                           for k in keys]})
    return out


def make_device_nodes(devices, major, dev_root="/", check=False):
    """Create every capability file ``devices`` lists that is missing or not the right
    character device (mode 0444: the cgroup device rules decide who opens it). Returns the
    paths created."""
    made = []
    for device in devices:
        for path in device["files"][1:]:
            minor = int(path.rsplit("nvidia-cap", 1)[1])
            target = os.path.join(dev_root, path.lstrip("/"))
            try:
                st = os.stat(target)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
                    continue
                if not check:
                    os.unlink(target)
            except FileNotFoundError:
                pass
            made.append(path)
            if not check:
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                os.mknod(target, stat.S_IFCHR | 0o444, os.makedev(major, minor))
                os.chmod(target, 0o444)
    return made


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def converge(run, planned, nvidia_smi="nvidia-smi", proc_root="/proc", dev_root="/",
             check=False):
    """``apply``, then the capability files of every MIG device. Returns {changed, gpus,
    devices (device_files), nodes_made}; raises RuntimeError with one line on any failure. The
    gpu_mig module and the gpuc-mig program (boot) both call this."""
    result = apply(run, planned, nvidia_smi, check=check)
    devices, made = [], []
    if result["instances"]:
        rc, out, err = run([nvidia_smi, "mig", "-lci"])
        if rc != 0:
            raise RuntimeError("nvidia-smi mig -lci failed: %s" % _words(err or out))
        minors = _read(os.path.join(proc_root, "driver/nvidia-caps/mig-minors"))
        major = caps_major(_read(os.path.join(proc_root, "devices")))
        if minors is None or major is None:
            raise RuntimeError("the driver lists no MIG capability minors or no nvidia-caps "
                               "major under %s: is the NVIDIA module loaded?" % proc_root)
        devices = device_files(result["instances"], parse_lci(out), parse_mig_minors(minors))
        try:
            made = make_device_nodes(devices, major, dev_root, check=check)
        except OSError as exc:
            raise RuntimeError("cannot make the MIG device files: %s" % exc) from None
    return {"changed": result["changed"] or bool(made), "gpus": result["gpus"],
            "devices": devices, "nodes_made": made}
