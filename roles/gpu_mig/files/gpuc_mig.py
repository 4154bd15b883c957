"""gpuc-mig LAYOUT_FILE: apply the planned MIG layout and make the MIG devices' capability
files, as the gpu_mig role did at install; run by gpuc-mig.service at every boot (GPU instances
do not survive one). LAYOUT_FILE is the role's JSON: {"layout": [...], "proc_root": "/proc"}
(and "dev_root", where /dev/nvidia-caps is made, default "/").

Exit 0 when the GPUs hold the layout; 1 with one line naming the GPU and nvidia-smi's words
otherwise; 2 on a bad argument or file. The policy is the collection's
module_utils/gpucluster/mig.py, installed beside this program by the role.
"""

import json
import os
import shutil
import subprocess
import sys

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib",
                   "gpuc-mig")


def run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def main(argv):
    if len(argv) != 2:
        print("usage: gpuc-mig LAYOUT_FILE", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as handle:
            spec = json.load(handle)
        layout = spec["layout"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"gpuc-mig: cannot read {argv[1]}: {exc}", file=sys.stderr)
        return 2
    sys.path.insert(0, LIB)
    from gpucluster.mig import converge  # installed beside, see LIB

    nvidia_smi = shutil.which("nvidia-smi") or "nvidia-smi"
    try:
        result = converge(run, layout, nvidia_smi, spec.get("proc_root") or "/proc",
                          spec.get("dev_root") or "/")
    except (RuntimeError, OSError) as exc:
        print(f"gpuc-mig: {exc}", file=sys.stderr)
        return 1
    changed = ", ".join(map(str, result["gpus"])) or "none"
    print(f"gpuc-mig: {len(result['devices'])} MIG device(s); GPUs changed: {changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
