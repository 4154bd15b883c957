"""Hardware profiles (provisioner/data/profiles.yml): what a node looks like, what it must reach.

Also home of the two helpers every data file of the package shares (YAML reading and turning a
pydantic error into one line naming the file and the key), so the stack matrix
(matrix/schema.py) reports the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from provisioner import site
from provisioner.errors import InputError
from provisioner.pcie import pcie_gbps

DATA_DIR = Path(__file__).resolve().parent / "data"
PROFILES_FILE = DATA_DIR / "profiles.yml"

Architecture = Literal["volta", "turing", "ampere", "ada", "hopper", "blackwell"]
Fabric = Literal["infiniband", "roce", "ethernet"]
# A driver release, as in stacks.yml (matrix/versions.py DRIVER_RE; not imported: the matrix
# imports this module).
_DRIVER_VERSION = r"^\d{3}\.\d{1,3}(\.\d{1,3})?$"

# What a machine is, as its tools show it, in the order the YAML documents them: what validate
# and preflight compare a node with (plan.EXPECTED_FIELDS), what the simulator builds a node
# from (SIM_FIELDS) and what `profiles detect` reads from a machine (detect.DETECTED_FIELDS).
HARDWARE_FIELDS: tuple[str, ...] = (
    "gpu_model", "gpu_count", "architecture", "pci_device_ids", "memory_mib", "power_limit_w",
    "pcie_gen", "pcie_width", "nvlink_links_per_gpu", "nvlink_link_speed_gbps", "nvswitch",
    "ib_hcas", "ib_rate_gbps",
)
# The fields the GPU simulator reads (Profile.sim_json).
SIM_FIELDS: tuple[str, ...] = (
    *HARDWARE_FIELDS, "fabric", "multi_node_nvlink", "busbw_floor_intra_gbps",
    "busbw_floor_inter_gbps",
    "memory_bandwidth_gbps", "simulated", "mig_profiles",
)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The top-level mapping of a YAML data file; any problem is one ``InputError`` line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from exc
    try:
        # libyaml's safe loader where PyYAML has it: the same data, several times faster.
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(f"{path}: not valid YAML{where}: {problem}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping at the top level, "
                         f"found {type(data).__name__}")
    return data


def validation_error_line(path: Path, exc: ValidationError, prefix: tuple[str, ...] = ()) -> str:
    """One line for the first problem pydantic found: file, dotted key, what is wrong."""
    first = exc.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in (*prefix, *first["loc"])) or "(top level)"
    more = exc.error_count() - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{path}: {loc}: {first['msg']}{tail}"


# A GPU-instance profile name as `nvidia-smi mig -lgip` prints it without its "MIG " prefix:
# compute slices, "g.", memory in GB, "gb", and an optional extension (+me: media engines).
_MIG_NAME = r"^[1-8]g\.[0-9]+gb(\+[a-z]+)?$"
# Memory slices of a MIG-capable GPU: placements are start slots 0..7 (nvidia-smi mig -lgipp
# prints "{0,4}:4", the starts and the size in slices).
MIG_MEMORY_SLOTS = 8


class MigProfile(BaseModel):
    """One GPU-instance profile of a MIG-capable GPU, as `nvidia-smi mig -lgip` and `-lgipp`
    list it (profiles.yml cites the source of each table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_MIG_NAME)
    id: int = Field(ge=0, le=63)
    # Compute slices (the leading "Ng") and memory slices (the ":N" of -lgipp), of 7 and 8.
    slices: int = Field(ge=1, le=7)
    memory_slices: int = Field(ge=1, le=MIG_MEMORY_SLOTS)
    # The instance's framebuffer as nvidia-smi prints it (MiB), and its SM count.
    memory_mib: int = Field(gt=0)
    multiprocessors: int | None = Field(default=None, gt=0)
    # How many instances of this profile one GPU holds at most ("Instances Total").
    instances: int = Field(ge=1, le=7)
    # The memory slots an instance may start at (-lgipp's "{0,4}").
    placements: tuple[int, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _fits(self) -> MigProfile:
        for start in self.placements:
            if start < 0 or start + self.memory_slices > MIG_MEMORY_SLOTS:
                raise ValueError(f"placement {start} of {self.name} with {self.memory_slices} "
                                 f"memory slices does not fit the GPU's {MIG_MEMORY_SLOTS}")
        return self


class Profile(BaseModel):
    """One hardware profile. Units are the ones the tools print (see profiles.yml header)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    gpu_model: str = Field(min_length=1)
    gpu_count: int = Field(ge=1, le=72)
    architecture: Architecture
    pci_device_ids: tuple[str, ...] = Field(min_length=1)
    memory_mib: int = Field(gt=0)
    power_limit_w: int = Field(gt=0)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_width: Literal[1, 2, 4, 8, 16]
    nvlink_links_per_gpu: int = Field(ge=0, le=18)
    nvlink_link_speed_gbps: float = Field(ge=0)
    nvswitch: bool
    # NVSwitch chip generation (2: HGX A100, 3: HGX H100/H200, 4: HGX B200); required with
    # nvswitch: true. It decides the fabric manager's prerequisites (stacks.yml).
    nvswitch_generation: int | None = Field(default=None, ge=1, le=9)
    # Multi-node NVLink: the GPUs reach other nodes' GPUs over NVLink (a GB200 NVL72 rack's
    # compute trays share one NVLink domain through its NVLink switch trays). validate then
    # judges every GPU's fabric registration and the IMEX service the domain needs.
    multi_node_nvlink: bool = False
    # The oldest driver release that knows this GPU model (None: its architecture's branch
    # minimum in stacks.yml decides). Checked at plan time against the resolved driver.
    min_driver: str | None = Field(default=None, pattern=_DRIVER_VERSION)
    ib_hcas: int = Field(ge=0)
    ib_rate_gbps: int = Field(ge=0)
    fabric: Fabric
    # GB/s (see profiles.yml's header); None: no floor yet (a profile written from a machine's
    # tool outputs, before a healthy node was measured): busbw is reported, not judged.
    busbw_floor_intra_gbps: float | None = Field(default=None, gt=0)
    busbw_floor_inter_gbps: float | None = Field(default=None, gt=0)
    # Gb/s per HCA for perftest ib_write_bw; 0 = no floor (see profiles.yml's header).
    ib_write_bw_floor_gbps: float = Field(default=0.0, ge=0)
    # GB/s, the GPU's memory bandwidth in its datasheet (the simulated nvbandwidth's local copy
    # derives from it, and the local-copy floor must leave room under it); None: not given.
    memory_bandwidth_gbps: float | None = Field(default=None, gt=0)
    # `provisioner certify --level burn-in` floors, per GPU (see profiles.yml's header for what
    # each is judged over); None: no floor, the check is skipped saying so.
    copy_h2d_gbps_min: float | None = Field(default=None, gt=0)
    copy_d2h_gbps_min: float | None = Field(default=None, gt=0)
    copy_d2d_gbps_min: float | None = Field(default=None, gt=0)
    burn_tflops_min: float | None = Field(default=None, gt=0)
    # The GPU-instance profiles of a MIG-capable GPU (empty: no MIG, or none listed here): what
    # a host's gpu_mig_layout may name (provisioner/mig.py).
    mig_profiles: tuple[MigProfile, ...] = ()
    simulated: bool
    sources: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        for pci_id in self.pci_device_ids:
            vendor, _, device = pci_id.partition(":")
            if vendor != "10de" or len(device) != 4 or not _is_lower_hex(device):
                raise ValueError(f"pci_device_ids entry {pci_id!r} is not like '10de:2330' "
                                 "(NVIDIA vendor id, four lower-case hex digits)")
        if (self.nvlink_links_per_gpu > 0) != (self.nvlink_link_speed_gbps > 0):
            raise ValueError("nvlink_links_per_gpu and nvlink_link_speed_gbps must both be 0 "
                             "(no NVLink) or both be set")
        if self.nvswitch and (self.nvlink_links_per_gpu == 0 or self.gpu_count < 2):
            raise ValueError("nvswitch: true needs NVLink (nvlink_links_per_gpu > 0) and "
                             "more than one GPU")
        if self.multi_node_nvlink and self.nvlink_links_per_gpu == 0:
            raise ValueError("multi_node_nvlink: true needs NVLink (nvlink_links_per_gpu > 0)")
        if self.nvswitch != (self.nvswitch_generation is not None):
            raise ValueError("nvswitch_generation must be set exactly when nvswitch is true")
        if (self.ib_hcas > 0) != (self.ib_rate_gbps > 0):
            raise ValueError("ib_hcas and ib_rate_gbps must both be 0 or both be set")
        if self.ib_write_bw_floor_gbps > self.ib_rate_gbps:
            raise ValueError(f"ib_write_bw_floor_gbps {self.ib_write_bw_floor_gbps:g} is above "
                             f"the HCAs' rate ib_rate_gbps {self.ib_rate_gbps} and could never "
                             "be met")
        if self.fabric in ("infiniband", "roce") and self.ib_hcas == 0:
            raise ValueError(f"fabric: {self.fabric} needs ib_hcas > 0 (RDMA adapters)")
        names = [mig.name for mig in self.mig_profiles]
        if len(set(names)) != len(names) or len({m.id for m in self.mig_profiles}) != len(names):
            raise ValueError("mig_profiles: each name and each id may appear once")
        line = pcie_gbps(self.pcie_gen, self.pcie_width)
        for key in ("copy_h2d_gbps_min", "copy_d2h_gbps_min"):
            floor = getattr(self, key)
            if floor is not None and floor > line:
                raise ValueError(f"{key} {floor:g} is above the PCIe Gen{self.pcie_gen} "
                                 f"x{self.pcie_width} line rate ({line:.1f} GB/s per direction) "
                                 "and could never be met")
        if (self.copy_d2d_gbps_min is not None and self.memory_bandwidth_gbps is not None
                and self.copy_d2d_gbps_min > self.memory_bandwidth_gbps / 2):
            raise ValueError(f"copy_d2d_gbps_min {self.copy_d2d_gbps_min:g} is above half the "
                             f"memory bandwidth ({self.memory_bandwidth_gbps:g} GB/s: a local "
                             "copy reads and writes every byte) and could never be met")
        return self

    def sim_json(self) -> dict[str, Any]:
        """The profile as the GPU simulator reads it (/etc/gpu-sim/profile.json): JSON types."""
        out: dict[str, Any] = {"name": self.name}
        for key in SIM_FIELDS:
            value = getattr(self, key)
            if key == "mig_profiles":
                value = [mig.model_dump(mode="json") for mig in value]
            out[key] = list(value) if isinstance(value, tuple) else value
        return out


def _is_lower_hex(text: str) -> bool:
    return all(ch in "0123456789abcdef" for ch in text)


def _raw_profiles(path: Path) -> Mapping[str, Any]:
    """The ``profiles`` mapping of a profiles file, its top level checked."""
    data = read_yaml_mapping(path)
    unknown = sorted(set(data) - {"schema_version", "profiles"})
    if unknown:
        raise InputError(f"{path}: {unknown[0]}: unknown top-level key; "
                         "expected schema_version and profiles")
    if data.get("schema_version") != 1:
        raise InputError(f"{path}: schema_version: expected 1, found "
                         f"{data.get('schema_version')!r}")
    raw = data.get("profiles")
    if not isinstance(raw, Mapping) or not raw:
        raise InputError(f"{path}: profiles: expected a mapping of profile name to profile")
    return raw


def load_profiles(path: Path | None = None) -> dict[str, Profile]:
    """Every profile of ``path``, validated once here; without a path, the packaged
    profiles.yml and the active site's (provisioner/site.py), validated the same way.

    A broken file raises ``InputError`` naming the file and the key.
    """
    return {name: profile for name, (profile, _source) in _load(path).items()}


def profile_sources(path: Path | None = None) -> dict[str, str]:
    """Where each profile came from: site.BUILT_IN or the site file."""
    return {name: source for name, (_profile, source) in _load(path).items()}


def load_profiles_with_sources() -> dict[str, tuple[Profile, str]]:
    """Each profile and where it came from, read and validated once (`provisioner profiles`)."""
    return _load(None)


def _load(path: Path | None) -> dict[str, tuple[Profile, str]]:
    raw = dict(_raw_profiles(path or PROFILES_FILE))
    origin = dict.fromkeys((str(name) for name in raw), site.BUILT_IN)
    site_file = site.file(site.PROFILES) if path is None else None
    if site_file is not None:
        raw, origin = site.merge_entries("profiles", raw, _raw_profiles(site_file), site_file)
    profiles: dict[str, tuple[Profile, str]] = {}
    for name, body in raw.items():
        where = Path(origin[str(name)]) if origin[str(name)] != site.BUILT_IN else (
            path or PROFILES_FILE)
        if not isinstance(body, Mapping):
            raise InputError(f"{where}: profiles.{name}: expected a mapping of fields")
        if "name" in body:
            raise InputError(f"{where}: profiles.{name}.name: the key is the name; "
                             "remove the name field")
        try:
            profile = Profile.model_validate({**body, "name": str(name)})
        except ValidationError as exc:
            raise InputError(validation_error_line(where, exc, ("profiles", str(name)))) from exc
        profiles[str(name)] = (profile, origin[str(name)])
    return profiles
