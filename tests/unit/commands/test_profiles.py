"""`provisioner profiles` in-process (provisioner/commands/profiles.py): the rows of --json."""

from __future__ import annotations

import json

import pytest

from provisioner import cli


def test_profiles_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["profiles", "--json"]) == 0
    rows = {r["profile"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["hgx-h100-8gpu"]["nvswitch"] == "gen 3"
    assert rows["pcie-l40s-4gpu"]["nvswitch"] == "no"
    assert rows["pcie-l40s-4gpu"]["fabric"].endswith("Gb/s roce")
    assert rows["pcie-l40s-4gpu"]["fabric"].startswith("2x ")
    assert (rows["sim-h100-8gpu"]["simulated"], rows["hgx-h100-8gpu"]["simulated"]) == ("yes", "")
    assert rows["hgx-h100-8gpu"]["gpu"].startswith("8x ")
