"""rdma_peermem_wanted: the rdma role loads nvidia-peermem where GPUDirect RDMA has no dma_buf
path (auto), by the rule validate applies without the CUDA driver (module_utils gpudirect)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.collection_module import load_plugin

wanted = load_plugin("filter", "rdma_peermem").rdma_peermem_wanted


@pytest.mark.parametrize(("gpu_node", "fabric", "flavour", "kernel", "expected"), [
    (True, "infiniband", "open", "6.1.0-28-amd64", False),      # dma_buf: not needed
    (True, "roce", "open", "5.12.0", False),
    (True, "infiniband", "open", "5.4.0-200-generic", True),     # kernel too old for dma_buf
    (True, "infiniband", "proprietary", "6.8.0-49-generic", True),
    (True, "roce", "", "6.8.0-49-generic", True),               # flavour unknown: keep it
    (True, "ethernet", "proprietary", "6.8.0", False),          # no RDMA
    (False, "infiniband", "proprietary", "6.8.0", False),       # not a GPU node
])
def test_auto(gpu_node: bool, fabric: str, flavour: str, kernel: str, expected: bool) -> None:
    assert wanted("auto", gpu_node, fabric, flavour, kernel) is expected


@pytest.mark.parametrize(("setting", "expected"), [
    (True, True), (False, False), ("true", True), ("False", False), ("yes", True), ("0", False)])
def test_a_given_setting_is_kept(setting: Any, expected: bool) -> None:
    # Even where auto would decide otherwise.
    assert wanted(setting, False, "ethernet", "open", "6.8.0") is expected


def test_anything_else_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="rdma_peermem must be auto, true or false"):
        wanted("sometimes", True, "infiniband", "open", "6.8.0")
