"""A driver override outside the matrix: its Ubuntu package revisions come from the
repository's index (gpu_package_index) or the override's full version, never from a rule on the
number (NVIDIA's Ubuntu repositories publish 535.183.06 as -1 and the older-numbered 535.216.01
as -0ubuntu1: the revision follows the publishing date)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import yaml

from provisioner import plan
from provisioner.errors import InputError
from provisioner.matrix import load_matrix, packages_for, resolve_stack
from provisioner.profiles import load_profiles

MATRIX = load_matrix()
H100 = load_profiles()["hgx-h100-8gpu"]


def ubuntu_driver(pins: list[object]) -> dict[str, str]:
    return {p.name: p.version for p in pins if p.component == "driver"}  # type: ignore[attr-defined]


def test_a_release_of_the_matrix_takes_its_listed_revisions() -> None:
    r = resolve_stack("gpu-01", {"gpu_stack": "cuda-13.0", "nvidia_driver_version": "580.95.05"},
                      H100, MATRIX)
    assert ubuntu_driver(packages_for(r, "apt_ubuntu")) == {
        "nvidia-driver-580-open": "580.95.05-0ubuntu1", "cuda-drivers-580": "580.95.05-0ubuntu1"}


def test_an_unlisted_release_without_an_index_is_refused_in_one_line() -> None:
    with pytest.raises(InputError) as exc:
        resolve_stack("gpu-01", {"gpu_stack": "cuda-13.0",
                                 "nvidia_driver_version": "580.126.09"}, H100, MATRIX)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("host gpu-01: nvidia_driver_version 580.126.09 is not a release in "
                              "stacks.yml")
    assert "set gpu_package_index" in message
    assert 'nvidia_driver_version: "580.126.09-<revision>"' in message


def test_the_full_package_version_gives_the_revision() -> None:
    r = resolve_stack("gpu-01", {"gpu_stack": "cuda-13.0",
                                 "nvidia_driver_version": "580.126.09-1ubuntu1"}, H100, MATRIX)
    assert r.driver_version == "580.126.09"
    assert r.as_vars()["nvidia_driver_version"] == "580.126.09"
    assert ubuntu_driver(packages_for(r, "apt_ubuntu")) == {
        "nvidia-driver-580-open": "580.126.09-1ubuntu1", "cuda-drivers-580": "580.126.09-1ubuntu1"}
    # Debian and RHEL keep their own revisions.
    assert ubuntu_driver(packages_for(r, "apt"))["cuda-drivers-580"] == "580.126.09-1"


def write_index(directory: Path, packages: dict[str, list[str]]) -> Path:
    directory.mkdir(parents=True)
    text = "".join(f"Package: {name}\nVersion: {v}\n\n"
                   for name, versions in packages.items() for v in versions)
    (directory / "Packages.gz").write_bytes(gzip.compress(text.encode()))
    return directory


def inventory(tmp_path: Path, **hostvars: object) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-01": {"ansible_host": "192.0.2.10", **hostvars}}}}}}))
    return path


def test_the_index_gives_each_packages_revision(tmp_path: Path) -> None:
    # Revisions as they were published: the older 535.183.06 is -1, 535.216.01 -0ubuntu1.
    index = write_index(tmp_path / "ubuntu2204" / "x86_64", {
        "cuda-drivers-535": ["535.183.06-1", "535.216.01-0ubuntu1"],
        "nvidia-fabricmanager-535": ["535.183.06-1", "535.216.01-1"],
        "nvidia-driver-535": ["535.183.06-0ubuntu1", "535.216.01-0ubuntu1"]})
    for release, cuda_drivers in (("535.183.06", "1"), ("535.216.01", "0ubuntu1")):
        path = inventory(tmp_path, gpu_profile="hgx-h100-8gpu", gpu_stack="cuda-12.2",
                         nvidia_driver_version=release, gpu_package_index=str(index))
        host = plan.build(path).hosts["gpu-01"]
        pins = host.variables()["nvidia_repo_stack_packages"]["apt_ubuntu"]["driver"]
        assert {p["name"]: p["version"] for p in pins} == {
            "nvidia-driver-535": f"{release}-0ubuntu1",
            "cuda-drivers-535": f"{release}-{cuda_drivers}"}


def test_a_release_the_index_lacks_is_refused(tmp_path: Path) -> None:
    index = write_index(tmp_path / "idx", {"cuda-drivers-580": ["580.95.05-0ubuntu1"]})
    path = inventory(tmp_path, gpu_profile="hgx-h100-8gpu", gpu_stack="cuda-13.0",
                     nvidia_driver_version="580.126.09", gpu_package_index=str(index))
    with pytest.raises(InputError, match=r"the index .*idx has no cuda-drivers-580 of that "
                                         "release"):
        plan.build(path)


def fabric_manager(pins: list[object]) -> dict[str, str]:
    return {p.name: p.version for p in pins if p.component == "fabricmanager"}  # type: ignore[attr-defined]


def test_the_fabric_manager_follows_the_overrides_ubuntu_revision() -> None:
    # An HGX board runs the fabric manager at the driver's release: on Ubuntu at the revision
    # the repository gives that release, not Debian's -1.
    full = resolve_stack("gpu-01", {"gpu_stack": "cuda-13.0",
                                    "nvidia_driver_version": "580.126.09-1ubuntu1"}, H100, MATRIX)
    assert fabric_manager(packages_for(full, "apt_ubuntu")) == {
        "nvidia-fabricmanager": "580.126.09-1ubuntu1", "libnvidia-nscq": "580.126.09-1ubuntu1"}
    assert fabric_manager(packages_for(full, "apt"))["nvidia-fabricmanager"] == "580.126.09-1"
    listed = resolve_stack("gpu-01", {"gpu_stack": "cuda-12.9",
                                      "nvidia_driver_version": "580.159.04"}, H100, MATRIX)
    assert fabric_manager(packages_for(listed, "apt_ubuntu"))["nvidia-fabricmanager"] == \
        "580.159.04-1ubuntu1"


def test_the_index_gives_the_fabric_managers_revision(tmp_path: Path) -> None:
    index = write_index(tmp_path / "ubuntu2404" / "x86_64", {
        "cuda-drivers-580": ["580.173.02-1ubuntu1"],
        "nvidia-driver-580-open": ["580.173.02-1ubuntu1"],
        "nvidia-fabricmanager": ["580.173.02-1ubuntu1"]})
    path = inventory(tmp_path, gpu_profile="hgx-h100-8gpu", gpu_stack="cuda-13.0",
                     nvidia_driver_version="580.173.02", gpu_package_index=str(index))
    pins = plan.build(path).hosts["gpu-01"].variables()["nvidia_repo_stack_packages"]
    assert {p["name"]: p["version"] for p in pins["apt_ubuntu"]["fabricmanager"]} == {
        "nvidia-fabricmanager": "580.173.02-1ubuntu1", "libnvidia-nscq": "580.173.02-1ubuntu1"}


def test_a_rule_the_override_breaks_is_named_before_its_revision() -> None:
    with pytest.raises(InputError, match=r"is too old for cuda_version 12\.4"):
        resolve_stack("gpu-01", {"gpu_stack": "cuda-12.4", "nvidia_driver_version": "535.54.03"},
                      H100, MATRIX)


def test_the_fabric_managers_revision_may_be_given_apart() -> None:
    # R570 and older: the fabric manager kept Debian's -1 beside a -0ubuntu1 driver.
    r = resolve_stack("gpu-01", {"gpu_stack": "cuda-12.4",
                                 "nvidia_driver_version": "550.127.05-0ubuntu1",
                                 "nvidia_fabricmanager_version": "550.127.05-1"}, H100, MATRIX)
    assert fabric_manager(packages_for(r, "apt_ubuntu"))["nvidia-fabricmanager-550"] == \
        "550.127.05-1"
    assert ubuntu_driver(packages_for(r, "apt_ubuntu"))["cuda-drivers-550"] == \
        "550.127.05-0ubuntu1"


def test_an_index_without_the_fabric_manager_is_refused_on_nvswitch(tmp_path: Path) -> None:
    index = write_index(tmp_path / "idx", {"cuda-drivers-580": ["580.173.02-1ubuntu1"]})
    path = inventory(tmp_path, gpu_profile="hgx-h100-8gpu", gpu_stack="cuda-13.0",
                     nvidia_driver_version="580.173.02", gpu_package_index=str(index))
    with pytest.raises(InputError, match="has no nvidia-fabricmanager of that release"):
        plan.build(path)
