"""The driver role's derivations over its registered results (roles/nvidia_driver/vars/main.yml
calls these filters): which reading stands, check mode's unapplied change, the installed
kernels, the kernel holds that are the role's, and DKMS's errors. The results have the shapes
the role's tasks register: node_probe's and pinned_packages' readings
(module_utils/gpucluster/probe.py), ansible.builtin.command's results, a loop's results and a
skipped task's."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.collection_module import load_plugin

ROOT = Path(__file__).resolve().parents[2]

registered = load_plugin("module_utils/gpucluster", "registered")
unless_skipped = load_plugin("filter", "unless_skipped")
unapplied = load_plugin("filter", "unapplied")
stands = load_plugin("filter", "nvidia_driver_reading_stands")
kernels = load_plugin("filter", "nvidia_driver_kernels")
ours = load_plugin("filter", "nvidia_driver_kernel_ours")
dkms_errors = load_plugin("filter", "nvidia_driver_dkms_errors")
mok_to_import = load_plugin("filter", "nvidia_driver_mok_to_import")

# A task whose `when` was false, and a loop over no items.
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False",
           "false_condition": "__nvidia_driver_install.probe.commands.dkms is not defined"}
NO_ITEMS = {"changed": False, "skipped": True, "results": [], "msg": "No items in loop"}


def command(rc: int, stdout: str = "", stderr: str = "") -> dict[str, Any]:
    """A command as node_probe reports it."""
    return {"cmd": ["x"], "rc": rc, "stdout": stdout, "stderr": stderr,
            "stdout_lines": stdout.splitlines(), "stderr_lines": stderr.splitlines()}


DKMS_STATUS = ("nvidia/580.95.05, 6.1.0-18-amd64, x86_64: installed\n"
               "nvidia/580.95.05, 6.1.0-21-amd64, x86_64: installed\n")


def install(changed: bool = False, **drop: str) -> dict[str, Any]:
    """pinned_packages' result with what its probe read after the packages (vars/main.yml:
    __nvidia_driver_after_install_probe); `drop` removes one key of a probe section."""
    probe = {
        "files": {"loaded": {"path": "/sys/module/nvidia/version", "exists": True,
                             "isreg": True, "content": "580.95.05\n"}},
        "globs": {},
        "commands": {"dkms": command(0, DKMS_STATUS),
                     "persistenced": command(0, "ActiveState=active\nUnitFileState=enabled\n"),
                     "smi": command(0, "580.95.05\n580.95.05\n")},
        "installed": {},
        "packages": {"mismatched": [], "packages": []},
    }
    for section, key in drop.items():
        if key:
            del probe[section][key]
        else:
            del probe[section]
    return {"changed": changed, "changed_packages": [], "packages": [], "probe": probe}


# --- module_utils/gpucluster/registered.py: Ansible's own tests and unique ---------------------

@pytest.mark.parametrize(("result", "expected"), [
    ({"changed": True}, True),
    ({"changed": False, "results": [{"changed": True}]}, False),  # its own changed wins
    ({"results": [{"changed": False}, {"changed": True}]}, True),  # none: a loop's items
    ({"results": [{"changed": False}]}, False),
    ({"results": []}, False),
    ({"results": ["a"]}, False),
    ({}, False),
    (SKIPPED, False),
])
def test_changed_as_ansible_tests_it(result: dict[str, Any], expected: bool) -> None:
    assert registered.changed(result) is expected


@pytest.mark.parametrize(("result", "expected"), [
    (SKIPPED, True), (NO_ITEMS, True), ({"skipped": False}, False), (command(0), False), ({}, False),
])
def test_skipped_as_ansible_tests_it(result: dict[str, Any], expected: bool) -> None:
    assert registered.skipped(result) is expected


@pytest.mark.parametrize("test", ["changed", "skipped"])
def test_a_result_that_is_not_a_dict_is_refused(test: str) -> None:
    with pytest.raises(TypeError, match=f"The '{test}' test expects a dictionary"):
        getattr(registered, test)(["changed"])


def test_unique_keeps_the_first_and_ignores_case_as_ansible_does() -> None:
    assert registered.unique(["b", "a", "B", "c", "a", 1, 1]) == ["b", "a", "c", 1]
    assert registered.unique([]) == []


# --- unless_skipped ---------------------------------------------------------------------------

def test_the_tasks_own_reading_unless_it_was_skipped() -> None:
    read, earlier = command(0, DKMS_STATUS), command(127, "", "dkms: command not found")
    assert unless_skipped.unless_skipped(read, earlier) is read
    assert unless_skipped.unless_skipped(SKIPPED, earlier) is earlier
    assert unless_skipped.unless_skipped({"skipped": True}, {}) == {}
    assert unless_skipped.unless_skipped({"skipped": False, "rc": 1}, earlier) == {
        "skipped": False, "rc": 1}


def test_unless_skipped_refuses_what_is_not_a_result() -> None:
    with pytest.raises(TypeError):
        unless_skipped.unless_skipped("skipped", {})


# --- unapplied ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("results", "check_mode", "expected"), [
    (install(changed=True), True, True),
    (install(changed=False), True, False),
    (install(changed=True), False, False),  # applied: not check mode
    ({}, True, False),  # the install task did not run
    ([install(), {"changed": False, "results": [{"changed": True}]}], True, False),
    ([install(), {"results": [{"changed": True}]}], True, True),
    ([], True, False),
])
def test_unapplied(results: Any, check_mode: bool, expected: bool) -> None:
    assert unapplied.unapplied(results, check_mode) is expected


def test_unapplied_outside_check_mode_reads_nothing() -> None:
    assert unapplied.unapplied("not a result", False) is False


# --- nvidia_driver_reading_stands / nvidia_driver_verify_reading_stands ------------------------

DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/gpu-cluster-provisioner.conf"

@pytest.mark.parametrize(("result", "autoinstall", "expected"), [
    (install(), NO_ITEMS, True),  # a converged node
    ({**install(), "changed_files": []}, NO_ITEMS, True),  # none of the role's files written
    (install(), {}, True),  # dkms.yml has not run
    (install(), SKIPPED, True),  # dkms.yml skipped (no results)
    (install(changed=True), NO_ITEMS, True),  # a package change is verify's
    (install(files="loaded"), NO_ITEMS, False),
    (install(commands="persistenced"), NO_ITEMS, False),
    (install(files=""), NO_ITEMS, False),
    (install(commands=""), NO_ITEMS, False),
    ({"changed": True}, NO_ITEMS, False),  # check mode: no probe
    ({}, {}, False),  # no install result
    # the drop-in or a nouveau file written by the install call
    ({**install(changed=True), "changed_files": [DROPIN]}, NO_ITEMS, False),
    ({**install(changed=True), "changed_files": ["/etc/modprobe.d/blacklist-nouveau.conf"]},
     NO_ITEMS, False),
    (install(),
     {"changed": False, "results": [{"item": "6.1.0-21-amd64", "rc": 10, "changed": False}]},
     False),  # a DKMS build was tried, even one that failed
])
def test_the_install_calls_reading_stands(result: dict[str, Any], autoinstall: dict[str, Any],
                                          expected: bool) -> None:
    assert stands.nvidia_driver_reading_stands(result, autoinstall) is expected


@pytest.mark.parametrize(("result", "install_stands", "reboot_required", "reboot", "expected"), [
    (install(), True, False, {"skipped": True}, True),  # a converged node
    (install(), True, False, SKIPPED, True),
    (install(), False, False, {"skipped": True}, False),
    (install(changed=True), True, False, {"skipped": True}, False),
    (install(packages=""), True, False, {"skipped": True}, False),
    (install(commands="smi"), True, False, {"skipped": True}, False),
    (install(), True, True, {"skipped": True}, False),  # nvidia-smi not asked: a reboot pends
    (install(), True, False, {"changed": True, "rebooted": True}, False),  # rebooted in this run
])
def test_verify_reading_stands(result: dict[str, Any], install_stands: bool, reboot_required: bool,
                               reboot: dict[str, Any], expected: bool) -> None:
    assert stands.nvidia_driver_verify_reading_stands(
        result, install_stands, reboot_required, reboot) is expected


def test_verify_does_not_judge_the_install_result_when_the_install_reading_fell() -> None:
    assert stands.nvidia_driver_verify_reading_stands("not read", False, True, "nor this") is False


# --- nvidia_driver_kernels ------------------------------------------------------------------

def test_debian_kernels_from_boot_images_running_first() -> None:
    globs = {"boot_images": ["/boot/vmlinuz-6.1.0-13-amd64", "/boot/vmlinuz-6.1.0-18-amd64",
                             "/boot/vmlinuz-6.1.0-21-amd64"],
             "module_images": [], "builds": ["/lib/modules/6.1.0-18-amd64/build"]}
    assert kernels.nvidia_driver_kernels(globs, "6.1.0-18-amd64") == [
        "6.1.0-18-amd64", "6.1.0-13-amd64", "6.1.0-21-amd64"]


def test_rhel_kernels_from_both_places_without_rescue_images_each_once() -> None:
    globs = {"boot_images": ["/boot/vmlinuz-0-rescue-3c1b2e0e8f5a4a0c9d6b7e1f2a3b4c5d",
                             "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64",
                             "/boot/vmlinuz-5.14.0-503.11.1.el9_5.x86_64"],
             "module_images": ["/lib/modules/5.14.0-427.13.1.el9_4.x86_64/vmlinuz",
                               "/lib/modules/5.14.0-503.11.1.el9_5.x86_64/vmlinuz",
                               "/lib/modules/5.14.0-570.12.1.el9_6.x86_64/vmlinuz"]}
    assert kernels.nvidia_driver_kernels(globs, "5.14.0-427.13.1.el9_4.x86_64") == [
        "5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64",
        "5.14.0-570.12.1.el9_6.x86_64"]


def test_kernels_edge_cases_read_as_the_role_read_them() -> None:
    globs = {"boot_images": ["/boot/vmlinuz-vmlinuz-x", "/boot/vmlinuz-6.1.0-18-AMD64"],
             "module_images": ["/lib/modules/6.1.0-18-amd64/vmlinuz"]}
    # Only the leading vmlinuz- goes; releases equal ignoring case are one (Ansible's unique).
    assert kernels.nvidia_driver_kernels(globs, "6.1.0-18-amd64") == ["6.1.0-18-amd64", "vmlinuz-x"]
    # A container: no images, the running kernel only.
    assert kernels.nvidia_driver_kernels({"boot_images": [], "module_images": []}, "6.8.0-45-generic") == [
        "6.8.0-45-generic"]
    assert kernels.nvidia_driver_kernels({}, "6.8.0-45-generic") == ["6.8.0-45-generic"]


# --- nvidia_driver_kernel_ours -------------------------------------------------------------

def test_the_holds_that_are_the_roles_own_apt() -> None:
    wanted = ["linux-image-6.1.0-18-amd64", "linux-headers-6.1.0-18-amd64", "linux-image-amd64",
              "linux-headers-amd64"]
    # linux-image-amd64 was held by the administrator before (not in the record): not ours.
    assert ours.nvidia_driver_kernel_ours([], wanted, ["linux-image-amd64"]) == [
        "linux-image-6.1.0-18-amd64", "linux-headers-6.1.0-18-amd64", "linux-headers-amd64"]
    # Recorded before and still wanted stays ours though held now; no longer wanted goes.
    previous = ["linux-image-6.1.0-13-amd64", "linux-image-amd64", "linux-headers-amd64"]
    assert ours.nvidia_driver_kernel_ours(previous, wanted, wanted) == [
        "linux-image-amd64", "linux-headers-amd64"]


def test_the_holds_that_are_the_roles_own_dnf_each_once() -> None:
    assert ours.nvidia_driver_kernel_ours(["kernel-core", "kernel"], ["kernel", "kernel-core", "Kernel"],
                                          []) == ["kernel-core", "kernel"]
    assert ours.nvidia_driver_kernel_ours([], [], ["kernel"]) == []


# --- nvidia_driver_dkms_errors -------------------------------------------------------------

BUILDS = {"changed": True, "msg": "All items completed", "results": [
    {"item": "6.1.0-21-amd64", "rc": 10, "changed": False, "failed": False,
     "stderr": "\n  Error! Bad return status for module build on kernel: 6.1.0-21-amd64 (x86_64)\n"},
    {"item": "6.1.0-22-amd64", "rc": 0, "changed": True, "stderr": ""},
    {"item": "6.1.0-23-amd64", "skipped": True, "changed": False},  # no rc: left out
    {"item": "6.1.0-24-amd64", "rc": 1, "changed": False, "stderr": None},
]}


@pytest.mark.parametrize(("autoinstall", "status", "expected"), [
    (NO_ITEMS, command(0, DKMS_STATUS), []),
    ({}, command(0, DKMS_STATUS), []),
    (BUILDS, command(0, DKMS_STATUS),
     ["Error! Bad return status for module build on kernel: 6.1.0-21-amd64 (x86_64)", "None"]),
    # node_probe's reading: no msg, its stderr.
    (NO_ITEMS, command(127, "", "dkms: command not found"), ["dkms: command not found"]),
    # ansible.builtin.command's: its msg, though empty.
    (NO_ITEMS, {**command(2), "msg": "[Errno 2] No such file or directory: b'dkms'"},
     ["[Errno 2] No such file or directory: b'dkms'"]),
    (NO_ITEMS, {**command(1, "", "Error! x"), "msg": ""}, [""]),
    # No reading of dkms status at all (no rc): one empty error.
    (NO_ITEMS, {}, [""]),
    (SKIPPED, {"skipped": True}, [""]),
])
def test_dkms_errors(autoinstall: dict[str, Any], status: dict[str, Any], expected: list[str]) -> None:
    assert dkms_errors.nvidia_driver_dkms_errors(autoinstall, status) == expected


def test_dkms_errors_leave_their_inputs_alone() -> None:
    builds = copy.deepcopy(BUILDS)
    dkms_errors.nvidia_driver_dkms_errors(builds, command(1, "", "e"))
    assert builds == BUILDS


# --- registration -------------------------------------------------------------------------

@pytest.mark.parametrize(("mod", "names"), [
    (unless_skipped, ["unless_skipped"]),
    (unapplied, ["unapplied"]),
    (stands, ["nvidia_driver_reading_stands", "nvidia_driver_verify_reading_stands"]),
    (kernels, ["nvidia_driver_kernels"]),
    (ours, ["nvidia_driver_kernel_ours"]),
    (dkms_errors, ["nvidia_driver_dkms_errors"]),
    (mok_to_import, ["nvidia_driver_mok_to_import"]),
])
def test_each_filter_is_registered_under_its_name(mod: Any, names: list[str]) -> None:
    registry = mod.FilterModule().filters()
    assert sorted(registry) == sorted(names)
    for name in names:
        assert registry[name] is getattr(mod, name)


# --- the role calls them --------------------------------------------------------------------

def test_the_driver_roles_variables_call_the_filters_and_hold_no_rule_of_their_own() -> None:
    role_vars = yaml.safe_load((ROOT / "roles/nvidia_driver/vars/main.yml").read_text(encoding="utf-8"))
    for name, flt in [("__nvidia_driver_install_reading_stands", "nvidia_driver_reading_stands"),
                      ("__nvidia_driver_verify_reading_stands", "nvidia_driver_verify_reading_stands"),
                      ("__nvidia_driver_unapplied", "unapplied"),
                      ("__nvidia_driver_kernels", "nvidia_driver_kernels"),
                      ("__nvidia_driver_kernel_record", "unless_skipped"),
                      ("__nvidia_driver_kernel_ours", "nvidia_driver_kernel_ours"),
                      ("__nvidia_driver_dkms_before", "unless_skipped"),
                      ("__nvidia_driver_dkms_last", "unless_skipped"),
                      ("__nvidia_driver_dkms_errors", "nvidia_driver_dkms_errors"),
                      ("__nvidia_driver_probe", "unless_skipped"),
                      ("__nvidia_driver_mok_to_import", "nvidia_driver_mok_to_import"),
                      ("__nvidia_driver_dkms", "nvidia_driver_dkms_wanted"),
                      ("__nvidia_driver_precompiled_kmods", "nvidia_driver_precompiled_kmods"),
                      ("__nvidia_driver_precompiled_query", "nvidia_driver_precompiled_query")]:
        assert f"gpucluster.provisioner.{flt}(" in role_vars[name], name
    # A variable's template is a reference or filter calls: no branch, test or list comprehension.
    rule = re.compile(r"\b(if|else|and|or|not|is|select|reject|selectattr|rejectattr|map|unique)\b")
    templates = {name: value for name, value in role_vars.items()
                 if isinstance(value, str) and "{{" in value}
    assert len(templates) >= 12
    assert {name: rule.findall(value) for name, value in templates.items() if rule.search(value)} == {}


# --- nvidia_driver_mok_to_import ---------------------------------------------------------------

def test_only_certificates_of_keys_neither_enrolled_nor_requested_are_imported() -> None:
    signatures = {"secure_boot": "enabled", "keys": {
        "DKMS module signing key": {"certificate": "/var/lib/dkms/mok.pub",
                                    "enrolment": "not-enrolled"},
        "Ubuntu MOK": {"certificate": "/var/lib/shim-signed/mok/MOK.der",
                       "enrolment": "pending"},
        "Another": {"certificate": "/etc/site/key.der", "enrolment": "enrolled"},
        "Twice": {"certificate": "/var/lib/dkms/mok.pub", "enrolment": "not-enrolled"},
        "Unread": {"certificate": None, "enrolment": "not-enrolled"},
        "Unknown": {"certificate": "/etc/x.der", "enrolment": "unknown"},
    }}
    assert mok_to_import.nvidia_driver_mok_to_import(signatures) == ["/var/lib/dkms/mok.pub"]


@pytest.mark.parametrize("signatures", [{}, None, {"keys": None}, {"keys": ["x"]},
                                        {"keys": {"k": "not a mapping"}}])
def test_no_keys_means_nothing_to_import(signatures: Any) -> None:
    assert mok_to_import.nvidia_driver_mok_to_import(signatures) == []
