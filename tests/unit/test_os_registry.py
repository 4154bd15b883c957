"""One OS registry: the matrix's CUDA repository table (``repositories.cuda`` in
provisioner/data/stacks.yml) lists the supported OSes, and the roles follow it.

- every role's ``meta/main.yml`` ``platforms`` equals the platforms derived from the registry;
- per-OS role variables follow the linux-system-roles pattern: ``vars/<os_family>.yml`` for every
  OS family of the registry, optional ``vars/<distribution>_<major>.yml`` for a supported
  release, loaded before anything else by role_core's ``tasks/set_vars.yml`` (a loop of optional
  files), which the role's first task imports. Rocky and AlmaLinux load ``RedHat.yml`` through
  their OS family; a ``RedHat_<major>.yml`` would need ``Rocky_<major>.yml`` and
  ``AlmaLinux_<major>.yml`` symlinks to it (no role has one now);
- no inline OS ternaries or per-OS lookup tables in role tasks, defaults or vars.

Only this test reads stacks.yml; no role does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES_DIR = ROOT / "roles"
STACKS_FILE = ROOT / "provisioner" / "data" / "stacks.yml"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "tasks").is_dir())

# Release names Galaxy's platform list uses for Debian and Ubuntu (EL uses the major version).
DEBIAN_CODENAMES = {"11": "bullseye", "12": "bookworm", "13": "trixie"}
UBUNTU_CODENAMES = {"2004": "focal", "2204": "jammy", "2404": "noble"}
# Distributions ansible_facts['distribution'] names for the EL rebuilds that share RedHat's files.
EL_REBUILDS = ("Rocky", "AlmaLinux")


def load(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def registry() -> list[str]:
    data = load(STACKS_FILE)
    keys = sorted((data.get("repositories") or {}).get("cuda") or {})
    assert keys, f"{STACKS_FILE}: repositories.cuda lists no OS"
    return keys


def parse(key: str) -> tuple[str, str, str, str]:
    """A registry key -> (Galaxy platform, Galaxy version, os_family, distribution_major)."""
    m = re.fullmatch(r"(debian|ubuntu|rhel)(\d+)", key)
    assert m, f"{STACKS_FILE}: repositories.cuda key {key!r} is not debianN, ubuntuYYMM or rhelN"
    distro, number = m.groups()
    if distro == "debian":
        assert number in DEBIAN_CODENAMES, f"{key}: add Debian {number}'s codename to this test"
        return "Debian", DEBIAN_CODENAMES[number], "Debian", f"Debian_{number}"
    if distro == "ubuntu":
        assert number in UBUNTU_CODENAMES, f"{key}: add Ubuntu {number}'s codename to this test"
        return "Ubuntu", UBUNTU_CODENAMES[number], "Debian", f"Ubuntu_{number[:2]}"
    return "EL", number, "RedHat", f"RedHat_{number}"


def registry_platforms() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in registry():
        name, version, _, _ = parse(key)
        out.setdefault(name, []).append(version)
    return {name: sorted(versions) for name, versions in out.items()}


def registry_families() -> set[str]:
    return {parse(key)[2] for key in registry()}


def registry_releases() -> set[str]:
    """vars/<distribution>_<major>.yml names a supported release may have (EL rebuilds too)."""
    out = set()
    for key in registry():
        release = parse(key)[3]
        out.add(release)
        if release.startswith("RedHat_"):
            out.update(f"{rebuild}_{release.split('_')[1]}" for rebuild in EL_REBUILDS)
    return out


def os_vars_files(role_dir: Path) -> list[Path]:
    vars_dir = role_dir / "vars"
    if not vars_dir.is_dir():
        return []
    return sorted(p for p in vars_dir.iterdir() if p.name != "main.yml")


def os_vars_problems(role_dir: Path, families: set[str], releases: set[str]) -> list[str]:
    """What breaks the per-OS variables pattern in one role (empty: none)."""
    role, files = role_dir.name, os_vars_files(role_dir)
    problems: list[str] = []
    names = {p.stem for p in files}
    unknown = sorted(n for n in names if n not in families | releases)
    if unknown:
        problems.append(f"vars/{unknown} name no OS family ({sorted(families)}) or supported "
                        f"release ({sorted(releases)})")
    if files and families - names:
        problems.append(f"vars/ has no file for OS family {sorted(families - names)}")
    for path in files:
        if path.is_symlink():
            continue
        match = re.fullmatch(r"RedHat_(\d+)\.yml", path.name)
        for rebuild in EL_REBUILDS if match else ():
            link = path.with_name(f"{rebuild}_{path.stem.split('_')[1]}.yml")
            if not link.is_symlink() or link.resolve() != path.resolve():
                problems.append(f"vars/{link.name} should be a symlink to {path.name}")
        data = load(path)
        if not isinstance(data, dict) or not all(k.startswith(f"__{role}_") for k in data):
            problems.append(f"vars/{path.name}: per-OS variables are internal (__{role}_*)")
    if files:
        problems.extend(loader_problems(role_dir))
    return problems


CORE = "gpucluster.provisioner.role_core"
CORE_SET_VARS = ROLES_DIR / "role_core" / "tasks" / "set_vars.yml"


def loader_problems(role_dir: Path) -> list[str]:
    """The role's first task imports role_core's set_vars for this role and its facts."""
    role = role_dir.name
    first = (load(role_dir / "tasks" / "main.yml") or [{}])[0]
    imported = first.get("ansible.builtin.import_role") or {}
    if imported.get("name") != CORE or imported.get("tasks_from") != "set_vars":
        return [f"tasks/main.yml: the first task should import_role {CORE} tasks_from: set_vars"]
    given = first.get("vars") or {}
    want = {"role_core_role": role,
            "role_core_required_facts": f"{{{{ __{role}_required_facts }}}}"}
    if given != want:
        return [f"tasks/main.yml: the set_vars import should pass {want}, not {given}"]
    return []


def core_loader_problems() -> list[str]:
    tasks = load(CORE_SET_VARS) or []
    loaders = [t for t in tasks if "ansible.builtin.include_vars" in t]
    if len(loaders) != 1:
        return ["role_core set_vars.yml: one include_vars task should load the OS files"]
    loop = [str(item) for item in loaders[0].get("loop") or []]
    want = ["{{ ansible_facts['os_family'] }}.yml",
            "{{ ansible_facts['distribution'] }}_{{ ansible_facts['distribution_major_version'] }}.yml"]
    out = []
    if loop != want:
        out.append(f"role_core set_vars.yml: include_vars should loop over {want}, not {loop}")
    if "is file" not in str(loaders[0].get("when")):
        out.append("role_core set_vars.yml: a missing vars file must be skipped (`is file`)")
    # The caller's vars/, found beside this role whichever role_path the imported tasks see.
    if "role_core_role" not in str(loaders[0]["ansible.builtin.include_vars"]):
        out.append("role_core set_vars.yml: include_vars should read the calling role's vars/")
    return out


def test_the_shared_loader_reads_the_os_files_in_order() -> None:
    assert core_loader_problems() == []


ROLES_WITH_OS_VARS = [role for role in ROLES if os_vars_files(ROLES_DIR / role)]


def test_the_roles_that_differ_per_os_use_vars_files() -> None:
    assert set(ROLES_WITH_OS_VARS) >= {"cudnn", "nccl", "nvidia_driver", "rdma"}


@pytest.mark.parametrize("role", ROLES_WITH_OS_VARS)
def test_os_vars_follow_the_registry_and_the_pattern(role: str) -> None:
    problems = os_vars_problems(ROLES_DIR / role, registry_families(), registry_releases())
    assert problems == [], f"roles/{role}: " + "; ".join(problems)


def fake_role(tmp_path: Path, files: dict[str, str], links: dict[str, str]) -> Path:
    role = tmp_path / "demo"
    (role / "vars").mkdir(parents=True)
    (role / "tasks").mkdir()
    for name, body in files.items():
        (role / "vars" / name).write_text(body)
    for name, target in links.items():
        (role / "vars" / name).symlink_to(target)
    (role / "tasks" / "main.yml").write_text(
        (ROLES_DIR / "cudnn" / "tasks" / "main.yml").read_text().replace("cudnn", "demo"))
    return role


def test_a_redhat_release_file_without_rebuild_symlinks_is_refused(tmp_path: Path) -> None:
    body = "__demo_x: 1\n"
    role = fake_role(tmp_path, {"Debian.yml": body, "RedHat.yml": body, "RedHat_9.yml": body},
                     {"Rocky_9.yml": "RedHat_9.yml"})
    problems = os_vars_problems(role, {"Debian", "RedHat"}, registry_releases())
    assert problems == ["vars/AlmaLinux_9.yml should be a symlink to RedHat_9.yml"]
    (role / "vars" / "AlmaLinux_9.yml").symlink_to("RedHat_9.yml")
    assert os_vars_problems(role, {"Debian", "RedHat"}, registry_releases()) == []


def test_a_missing_family_or_an_unsupported_release_is_refused(tmp_path: Path) -> None:
    role = fake_role(tmp_path, {"Debian.yml": "__demo_x: 1\n", "Debian_13.yml": "x: 1\n"}, {})
    problems = os_vars_problems(role, {"Debian", "RedHat"}, registry_releases())
    assert any("Debian_13" in p for p in problems)
    assert any("no file for OS family ['RedHat']" in p for p in problems)
    assert any("internal (__demo_*)" in p for p in problems)


# Inline OS dispatch: `X if ansible_facts['os_family'] == ... else Y` and tables indexed by the OS.
OS_TERNARY = re.compile(
    r"\bif\s+ansible_facts\[\s*['\"](os_family|distribution\w*|pkg_mgr)['\"]\s*\]"
    r"|\[\s*ansible_facts\[\s*['\"](os_family|distribution\w*)['\"]\s*\]\s*\]")
# nvidia_repo and preflight get their OS data through the plan; they join this
# check when that lands.
NOT_YET = {"nvidia_repo", "preflight"}


@pytest.mark.parametrize("role", sorted(set(ROLES) - NOT_YET))
def test_no_inline_os_ternaries(role: str) -> None:
    hits = []
    for sub in ("tasks", "defaults", "vars", "handlers"):
        for path in sorted((ROLES_DIR / role / sub).glob("*.yml")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if OS_TERNARY.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == [], "per-OS values belong in vars/<os_family>.yml:\n" + "\n".join(hits)
