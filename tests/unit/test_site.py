"""Site data (provisioner/site.py): a site's profiles.yml and stacks.yml beside the built-in ones,
validated the same way, every plan rule applied to them, and `profiles`/`stacks` saying where
each entry came from. The site's entries here are the built-in ones, renamed and changed where
the test says: no hardware fact is made up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import cli, site
from provisioner.matrix import load_matrix, stack_sources
from provisioner.matrix.schema import STACKS_FILE
from provisioner.profiles import PROFILES_FILE, load_profiles, profile_sources

ON = "2026-11-27"
BUILT_IN_PROFILES = yaml.safe_load(PROFILES_FILE.read_text())["profiles"]
BUILT_IN_STACKS = yaml.safe_load(STACKS_FILE.read_text())["stacks"]


@pytest.fixture(autouse=True)
def no_site_after() -> Iterator[None]:
    yield
    site.activate(None)


def one_gpu_h200() -> dict[str, Any]:
    """The HGX H200 profile cut to one GPU of a cloud VM: no NVLink, no InfiniBand."""
    body = dict(BUILT_IN_PROFILES["hgx-h200-8gpu"])
    body.update(gpu_count=1, nvlink_links_per_gpu=0, nvlink_link_speed_gbps=0, nvswitch=False,
                ib_hcas=0, ib_rate_gbps=0, fabric="ethernet",
                description="one H200 of a cloud VM")
    for key in ("nvswitch_generation", "ib_write_bw_floor_gbps"):
        body.pop(key, None)
    return body


def write_site(where: Path, profiles: dict[str, Any] | None = None,
               stacks: dict[str, Any] | None = None, **extra: Any) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    if profiles is not None:
        (where / "profiles.yml").write_text(yaml.safe_dump(
            {"schema_version": 1, "profiles": profiles}))
    if stacks is not None or extra:
        (where / "stacks.yml").write_text(yaml.safe_dump(
            {"schema_version": 1, **({"stacks": stacks} if stacks is not None else {}),
             **extra}))
    return where


def inventory(tmp_path: Path, profile: str, stack: str) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {
        "hosts": {"gpu-01": {"ansible_host": "192.0.2.10"}},
        "vars": {"gpu_profile": profile, "gpu_stack": stack}}}}}))
    return path


def plan_cli(args: list[str], monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setenv("PROVISIONER_TODAY", ON)
    code = cli.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


# --------------------------------------------------------------------------- loading


def test_a_site_profile_adds_to_the_built_in_ones(tmp_path: Path) -> None:
    site.activate(write_site(tmp_path / "site", {"site-h200-1gpu": one_gpu_h200()}))
    profiles = load_profiles()
    assert profiles["site-h200-1gpu"].gpu_count == 1
    assert set(BUILT_IN_PROFILES) < set(profiles)
    sources = profile_sources()
    assert sources["site-h200-1gpu"] == str(tmp_path / "site" / "profiles.yml")
    assert sources["hgx-h200-8gpu"] == "built-in"
    site.activate(None)
    assert "site-h200-1gpu" not in load_profiles()


def test_a_clash_needs_override_and_override_needs_a_clash(tmp_path: Path) -> None:
    from provisioner.errors import InputError

    mine = {"hgx-h200-8gpu": one_gpu_h200()}
    site.activate(write_site(tmp_path / "a", mine))
    with pytest.raises(InputError, match=r"a/profiles.yml: profiles.hgx-h200-8gpu: a built-in "
                                         r"entry has this name; rename it or set override: "
                                         r"true"):
        load_profiles()
    site.activate(write_site(tmp_path / "b", {"hgx-h200-8gpu": {**one_gpu_h200(),
                                                                "override": True}}))
    assert load_profiles()["hgx-h200-8gpu"].gpu_count == 1
    assert profile_sources()["hgx-h200-8gpu"].endswith("b/profiles.yml")
    site.activate(write_site(tmp_path / "c", {"mine": {**one_gpu_h200(), "override": True}}))
    with pytest.raises(InputError, match=r"profiles.mine.override: there is no built-in entry"):
        load_profiles()
    site.activate(write_site(tmp_path / "d", {"mine": {**one_gpu_h200(), "override": "yes"}}))
    with pytest.raises(InputError, match=r"profiles.mine.override: expected true or false"):
        load_profiles()


def test_a_broken_site_profile_names_the_site_file_and_key(tmp_path: Path) -> None:
    from provisioner.errors import InputError

    site.activate(write_site(tmp_path / "site", {"mine": {**one_gpu_h200(), "gpu_count": 0}}))
    with pytest.raises(InputError) as exc:
        load_profiles()
    assert str(exc.value).startswith(f"{tmp_path / 'site' / 'profiles.yml'}: "
                                     "profiles.mine.gpu_count: ")


def test_a_site_stack_adds_and_is_checked_with_the_whole_matrix(tmp_path: Path) -> None:
    from provisioner.errors import InputError

    body = dict(BUILT_IN_STACKS["cuda-13.0"], os_support=["debian12", "rhel9"])
    site.activate(write_site(tmp_path / "ok", stacks={"cuda-13.0-site": body}))
    matrix = load_matrix()
    assert matrix.stacks["cuda-13.0-site"].driver.version == body["driver"]["version"]
    assert matrix.default_stack == yaml.safe_load(STACKS_FILE.read_text())["default_stack"]
    assert stack_sources()["cuda-13.0-site"].endswith("ok/stacks.yml")
    # A rule across the file: a CUDA release the matrix has no minimum driver for.
    site.activate(write_site(tmp_path / "bad", stacks={"cuda-13.9-site": {
        **body, "cuda_version": "13.9", "cuda_toolkit_version": "13.9.0"}}))
    with pytest.raises(InputError) as exc:
        load_matrix()
    assert str(exc.value).startswith(f"{tmp_path / 'bad' / 'stacks.yml'}: ")
    assert "stack cuda-13.9-site: cuda_version 13.9 has no cuda_minimum_driver entry" in str(
        exc.value)
    # A field of the stack: the location names it.
    site.activate(write_site(tmp_path / "typo", stacks={"cuda-13.0-x": {**body, "cuda": "13.0"}}))
    with pytest.raises(InputError, match=r"typo/stacks.yml: stacks.cuda-13.0-x.cuda: "):
        load_matrix()
    site.activate(write_site(tmp_path / "key", stacks={}, repositories={}))
    with pytest.raises(InputError, match=r"key/stacks.yml: repositories: a site's stacks.yml "
                                         r"holds only default_stack, driver_branches, "):
        load_matrix()


def test_the_site_is_given_or_beside_the_inventory(tmp_path: Path) -> None:
    from provisioner.errors import InputError

    hosts = tmp_path / "hosts.yml"
    assert site.resolve(None, hosts) is None
    write_site(tmp_path / "site", {"mine": one_gpu_h200()})
    assert site.resolve(None, hosts) == tmp_path / "site"
    assert site.resolve(None, tmp_path / "inventory-dir") == tmp_path / "site"
    with pytest.raises(InputError, match="--site nowhere: not a directory"):
        site.resolve("nowhere", hosts)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"holds neither profiles\.yml nor stacks\.yml"):
        site.resolve(tmp_path / "empty", hosts)


# --------------------------------------------------------------------------- through the CLI


def test_plan_uses_a_site_profile_and_stack_beside_the_inventory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    body = dict(BUILT_IN_STACKS["cuda-13.0"], os_support=["debian12", "rhel9"])
    write_site(tmp_path / "site", {"site-h200-1gpu": one_gpu_h200()},
               {"cuda-13.0-site": body})
    path = inventory(tmp_path, "site-h200-1gpu", "cuda-13.0-site")
    code, out, err = plan_cli(["plan", "-i", str(path), "--json"], monkeypatch, capsys)
    assert code == 0, err
    [host] = json.loads(out)["hosts"]
    assert host["profile"] == "site-h200-1gpu"
    assert host["variables"]["gpu_stack"] == "cuda-13.0-site"
    assert host["variables"]["gpu_supported_os"] == ["debian12", "rhel9"]


@pytest.mark.parametrize(("profile", "stack", "rule"), [
    # An H200 (min_driver 550.90.07) on a stack whose driver predates it.
    ("site-h200-1gpu", "cuda-12.4", "is older than NVIDIA H200 (10de:2335) needs "
                                     "(gpu_profile site-h200-1gpu: min_driver 550.90.07)"),
    # A Volta profile on a CUDA 13 stack.
    ("site-v100", "cuda-13.0", "cuda_version 13.0 cannot target volta GPUs"),
])
def test_a_site_profile_that_breaks_a_rule_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        profile: str, stack: str, rule: str) -> None:
    v100 = dict(BUILT_IN_PROFILES["sxm2-v100-8gpu"], description="the site's V100 nodes")
    write_site(tmp_path / "site", {"site-h200-1gpu": one_gpu_h200(), "site-v100": v100})
    path = inventory(tmp_path, profile, stack)
    code, _out, err = plan_cli(["plan", "-i", str(path), "--json"], monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert rule in lines[0], lines[0]


def test_profiles_and_stacks_say_where_each_entry_came_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    where = write_site(tmp_path / "s", {"site-h200-1gpu": one_gpu_h200()},
                       {"cuda-13.0-site": dict(BUILT_IN_STACKS["cuda-13.0"])})
    code, out, _ = plan_cli(["profiles", "--site", str(where), "--json"], monkeypatch, capsys)
    assert code == 0
    sources = {row["profile"]: row["source"] for row in json.loads(out)}
    assert sources["site-h200-1gpu"] == str(where / "profiles.yml")
    assert sources["hgx-h200-8gpu"] == "built-in"
    code, out, _ = plan_cli(["stacks", "--site", str(where), "--json"], monkeypatch, capsys)
    sources = {row["stack"]: row["source"] for row in json.loads(out)}
    assert sources["cuda-13.0-site"] == str(where / "stacks.yml")
    assert sources["cuda-13.0"] == "built-in"
    # The table shows the column only when a site added something.
    code, out, _ = plan_cli(["profiles"], monkeypatch, capsys)
    assert code == 0 and "source" not in out and "site" not in out
