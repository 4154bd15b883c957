"""Every package pin the provisioner resolves, held against a snapshot taken before package
naming moved to one source (tests/fixtures/package_pins.json): every stack x package family x
module flavour, with and without the fabric manager, plus overrides that change what names and
versions are derived from. A refactor that changes any pin fails here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.matrix import (
    FAMILIES,
    FLAVORS,
    ResolvedStack,
    load_matrix,
    packages_for,
    resolve_stack,
)
from tests.unit.pin_cases import OVERRIDE_CASES

SNAPSHOT: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "package_pins.json").read_text())
MATRIX = load_matrix()


def _resolve(hostvars: dict[str, Any], fabricmanager: bool) -> ResolvedStack:
    r = resolve_stack("gpu-01", hostvars, None, MATRIX)
    return dataclasses.replace(r, fabricmanager_enabled=fabricmanager)


def _pins(r: ResolvedStack, family: str) -> list[list[str]]:
    return [[p.component, p.name, p.version] for p in packages_for(r, family)]


def test_snapshot_covers_every_stack_family_flavour() -> None:
    expected = {f"{s}/{fam}/{fl}/{fm}" for s in MATRIX.stacks for fam in FAMILIES
                for fl in FLAVORS for fm in ("fm", "nofm")}
    assert set(SNAPSHOT["stacks"]) == expected
    assert set(SNAPSHOT["overrides"]) == set(OVERRIDE_CASES)


@pytest.mark.parametrize("key", sorted(SNAPSHOT["stacks"]))
def test_stack_pins_unchanged(key: str) -> None:
    stack, family, flavor, fm = key.split("/")
    r = _resolve({"gpu_stack": stack, "nvidia_driver_module_flavor": flavor}, fm == "fm")
    assert _pins(r, family) == SNAPSHOT["stacks"][key]


@pytest.mark.parametrize("case", sorted(OVERRIDE_CASES))
def test_override_pins_unchanged(case: str) -> None:
    r = _resolve(OVERRIDE_CASES[case], True)
    assert {f: _pins(r, f) for f in FAMILIES} == SNAPSHOT["overrides"][case]
