"""What an inventory may not smuggle past `plan`: a host name that would add lines to slurm.conf
or arguments to a command, a YAML document whose aliases expand to a billion values, and a
misspelt variable of the monitoring, node health, Slurm or MUNGE roles."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest
import yaml

from provisioner import cli, inventory
from provisioner.errors import InputError

RULE = ("not a valid host name (letters, digits, hyphens, underscores and dots; each "
        "dot-separated part 1-63 characters, starting and ending with a letter or digit; 253 "
        "characters at most); rename it")


def cluster(gpu_host: str = "gpu-01", **gpu_vars: object) -> dict[str, object]:
    return {"all": {"children": {
        "gpu_nodes": {"hosts": {gpu_host: {"gpu_profile": "hgx-h100-8gpu", **gpu_vars}}},
        "cpu_nodes": {"hosts": {"login-01": {}}},
    }}}


def write(tmp_path: Path, data: object, name: str = "hosts.yml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


BAD_NAMES = [
    "gpu-01\nNodeName=evil Gres=gpu:8",  # a line of its own in slurm.conf
    "gpu-01 --evil",  # an argument of its own on a command line
    "gpu-01\tx",
    "-gpu-01",
    "gpu-01-",
    "_gpu01",
    "gpu01_",
    "gpu-01..example",
    "gpu-01.example.com.",
    "a" * 64,
    ".".join(["a" * 63] * 4) + ".a",  # 254 characters
    "gpu-0\u0661",  # a non-ASCII digit
    "gpu;01",
    "gpu-01'",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=range(len(BAD_NAMES)))
def test_a_host_name_that_is_not_a_host_name_is_refused(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, cluster(name))
    with pytest.raises(InputError) as err:
        inventory.load(path)
    assert str(err.value) == f"inventory {path}: host {name!r}: {RULE}"
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["gpu-01", "GPU_01", "node1.example.com", "10.0.0.5", "a",
                                  "a" * 63, ".".join(["a" * 63] * 3) + "." + "a" * 61])
def test_valid_host_names_load(tmp_path: Path, name: str) -> None:
    assert inventory.load(write(tmp_path, cluster(name))).gpu_hosts == [name]


def test_a_bad_host_name_in_an_ini_inventory_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "[gpu_nodes]\ngpu-01;x gpu_profile=hgx-h100-8gpu\n", "hosts.ini")
    with pytest.raises(InputError, match=r"host 'gpu-01;x': not a valid host name"):
        inventory.load(path)


def test_plan_refuses_a_bad_host_name_in_one_line_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, cluster("gpu-01\nNodeName=evil"))
    assert cli.main(["plan", "-i", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"error: inventory {path}: host 'gpu-01\\nNodeName=evil': {RULE}"]


class RunAway(BaseException):
    """Not an Exception: no reader's error handling swallows it."""


@contextmanager
def refused_quickly() -> Iterator[None]:
    """The body must be done within a second; an expansion that runs away fails the test
    after five instead of hanging the run."""

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise RunAway("still expanding the aliases after 5 s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 5)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 1


def laughs(levels: int = 9) -> str:
    """The classic document: each level an anchored list of ten aliases of the one before."""
    rows = ['    l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"    l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return ("all:\n  vars:\n" + "\n".join(rows) + "\n  children:\n    gpu_nodes:\n      hosts:\n"
            "        gpu-01:\n          gpu_profile: hgx-h100-8gpu\n")


def test_a_billion_laughs_inventory_is_refused_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, laughs())
    assert len(path.read_bytes()) < 800
    with refused_quickly(), pytest.raises(InputError) as err:
        inventory.load(path)
    assert str(err.value) == (f"inventory {path}: its YAML aliases expand to more than 100,000 "
                              "values (a 'billion laughs' document?); write the values out or "
                              "use fewer aliases")


def test_a_billion_laughs_in_group_vars_is_refused_before_ansible_reads_it(
        tmp_path: Path) -> None:
    write(tmp_path, cluster())
    (tmp_path / "group_vars").mkdir()
    bomb = tmp_path / "group_vars" / "all.yml"
    bomb.write_text(laughs().split("  children:")[0].replace("all:\n  vars:\n", "")
                    .replace("\n    ", "\n").lstrip())
    with refused_quickly(), pytest.raises(InputError,
                                          match=f"inventory {bomb}: its YAML aliases expand"):
        inventory.load(tmp_path / "hosts.yml")


def test_plan_refuses_a_billion_laughs_in_one_line_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, laughs())
    with refused_quickly():
        assert cli.main(["plan", "-i", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: inventory {path}: its YAML aliases")


def test_an_alias_inside_the_value_it_names_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "all:\n  vars:\n    loop: &me [1, *me]\n" + laughs(1).split("  vars:\n")[1]
                 .split("\n", 1)[1])
    with pytest.raises(InputError, match=r"the alias \*me is inside the value it names"):
        inventory.load(path)


def test_an_inventory_with_a_few_anchors_and_aliases_loads(tmp_path: Path) -> None:
    path = write(tmp_path, """\
all:
  children:
    gpu_nodes:
      hosts:
        gpu-01: &gpu
          gpu_profile: hgx-h100-8gpu
          rdma_nccl_conf_extra: &env {NCCL_DEBUG: WARN}
        gpu-02: *gpu
        gpu-03:
          <<: *gpu
          gpu_stack: cuda-12.4
    cpu_nodes:
      hosts:
        login-01:
          rdma_nccl_conf_extra: *env
""")
    inv = inventory.load(path)
    assert inv.gpu_hosts == ["gpu-01", "gpu-02", "gpu-03"]
    assert inv.hosts["gpu-03"].vars["gpu_profile"] == "hgx-h100-8gpu"
    assert inv.hosts["login-01"].vars["rdma_nccl_conf_extra"] == {"NCCL_DEBUG": "WARN"}


def test_aliases_in_proportion_to_a_large_inventory_load(tmp_path: Path) -> None:
    """The bound grows with the file: 3,000 hosts each merging 40 shared values."""
    defaults = "".join(f"    x{i}: {i}\n" for i in range(40))
    hosts = "".join(f"        gpu-{i:04d}: {{<<: *d, gpu_profile: hgx-h100-8gpu}}\n"
                    for i in range(3000))
    text = (f"all:\n  vars:\n    d: &d\n{defaults.replace('    x', '      x')}  children:\n"
            f"    gpu_nodes:\n      hosts:\n{hosts}")
    assert inventory.load(write(tmp_path, text)).gpu_hosts[-1] == "gpu-2999"


@pytest.mark.parametrize(("variable", "hint"), [
    ("monitoring_alertmanger_port", " (did you mean monitoring_alertmanager_port?)"),
    ("node_health_intervall", " (did you mean node_health_interval?)"),
    ("slurm_node_gpu_cout", " (did you mean slurm_node_gpu_count?)"),
    ("munge_key_hots", " (did you mean munge_key_host?)"),
    ("slurm_enable", " (did you mean slurm_enabled?)"),
])
def test_a_misspelt_role_variable_is_refused(tmp_path: Path, variable: str, hint: str) -> None:
    path = write(tmp_path, cluster(**{variable: 1}))
    with pytest.raises(InputError) as err:
        inventory.load(path)
    assert str(err.value) == f"inventory {path}: host gpu-01: unknown variable {variable}{hint}"


def test_the_slurm_switches_of_the_inventory_contract_are_known(tmp_path: Path) -> None:
    path = write(tmp_path, cluster(slurm_enabled=True, slurm_gpu_type="h100"))
    assert inventory.load(path).hosts["gpu-01"].vars["slurm_enabled"] is True
    with pytest.raises(InputError, match=r"variable slurm_enabled .*bool"):
        inventory.load(write(tmp_path, cluster(slurm_enabled="perhaps")))


def test_rdma_peermem_is_auto_or_a_boolean(tmp_path: Path) -> None:
    for value in ("auto", True, False, "yes"):
        inventory.load(write(tmp_path, cluster(rdma_peermem=value)))
    with pytest.raises(InputError, match=r"rdma_peermem .*must be one of: auto, True, False.*"
                                         r"got: sometimes") as caught:
        inventory.load(write(tmp_path, cluster(rdma_peermem="sometimes")))
    assert "\n" not in str(caught.value)
