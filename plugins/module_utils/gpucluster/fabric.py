# -*- coding: utf-8 -*-
"""Multi-node NVLink (an NVLink domain spanning several nodes, as a GB200 NVL72 rack's compute
trays share one): each GPU's registration with the NVLink fabric, as ``nvidia-smi -q -x``
reports it, and the IMEX service that shares GPU memory across the domain's nodes.

A GPU of such a domain can reach the other nodes' GPUs only once the fabric has registered it:
its ``<fabric>`` block then reads state "Completed", status "Success", and carries the clique ID
and cluster UUID of its NVLink partition. Until then (state "Not Started" or "In Progress",
or a status other than "Success") NCCL and CUDA find no multi-node NVLink path. Every GPU of one
node belongs to one partition: two clique IDs or cluster UUIDs on one node is a
misconfiguration, judged here too.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import json

from .checks import FAIL, PASS, check_result

# What a registered GPU reports (nvmlGpuFabricState_t NVML_GPU_FABRIC_STATE_COMPLETED, and the
# nvmlReturn_t of the registration, NVML_SUCCESS, as nvidia-smi prints them).
FABRIC_DONE = ("Completed", "Success")
# The fabric health values nvidia-smi prints when nothing is wrong (a registered GB200 tray's
# R580 output: summary Healthy, bandwidth Full, the recovery and unhealthy flags False; NVML's
# nvmlGpuFabricHealthMask and health summary); any other printed value of one of these fields
# (bandwidth "Degraded", summary "Unhealthy" or "Limited Capacity", route_unhealthy "True")
# fails the GPU. Fields printed N/A are not judged.
HEALTHY = {"summary": "Healthy", "bandwidth": "Full", "route_recovery_in_progress": "False",
           "route_unhealthy": "False", "access_timeout_recovery": "False"}


def _gpu_fabric(gpu):
    """One GPU's fabric check, and its (clique ID, cluster UUID) when registered."""
    idx = gpu.get("index")
    name = "gpu%s_fabric" % idx
    fabric = gpu.get("fabric")
    want = "%s / %s" % FABRIC_DONE
    if fabric is None:
        return check_result(name, FAIL, None, want,
                            "GPU%s: nvidia-smi -q -x shows no <fabric> block: this driver does "
                            "not report the GPU's NVLink fabric registration" % idx), None
    state, status = fabric.get("state"), fabric.get("status")
    measured = "%s / %s" % (state or "N/A", status or "N/A")
    if (state, status) != FABRIC_DONE:
        return check_result(name, FAIL, measured, want,
                            "GPU%s: NVLink fabric registration %s (status %s): the GPU is not "
                            "in the NVLink domain; check the fabric manager (on NVLink switch "
                            "trays, NMX-C) and the GPU's NVLink cabling"
                            % (idx, state or "not reported", status or "N/A")), None
    health = fabric.get("health") or {}
    sick = ["%s %s" % (key, health[key]) for key in sorted(health)
            if key in HEALTHY and health[key] is not None and health[key] != HEALTHY[key]]
    part = (fabric.get("clique_id"), fabric.get("cluster_uuid"))
    measured += ", clique %s" % part[0]
    if sick:
        return check_result(name, FAIL, measured, want + ", " + ", ".join(
            "%s %s" % kv for kv in sorted(HEALTHY.items())),
            "GPU%s: registered, but fabric health: %s" % (idx, ", ".join(sick))), part
    return check_result(name, PASS, measured, want, "registered with the NVLink fabric"), part


def fabric_checks(gpu):
    """Every GPU registered with the NVLink fabric, and all of one node's GPUs in one NVLink
    partition (one clique ID and cluster UUID). ``gpu``: parse_nvidia_smi_xml's facts."""
    if not gpu or gpu.get("error"):
        return []  # gpu_visible has failed already, naming why
    out, parts = [], {}
    for g in gpu.get("gpus") or []:
        result, part = _gpu_fabric(g)
        out.append(result)
        if part is not None:
            parts.setdefault(part, []).append(g.get("index"))
    if len(parts) > 1:
        seen = "; ".join("clique %s cluster %s: GPU %s" % (c, u, ", ".join(map(str, idx)))
                         for (c, u), idx in sorted(parts.items(), key=lambda kv: str(kv[0])))
        out.append(check_result("fabric_partition", FAIL, seen, "one clique and cluster UUID",
                                "this node's GPUs sit in %d NVLink partitions: %s"
                                % (len(parts), seen)))
    elif parts:
        clique, uuid = next(iter(parts))
        out.append(check_result("fabric_partition", PASS, "clique %s, cluster %s" % (clique, uuid),
                                "one clique and cluster UUID", "all GPUs in one NVLink partition"))
    return out


# The IMEX service (NVIDIA IMEX guide): the daemon "nvidia-imex" on every compute node of the
# domain, the domain's node addresses one per line in its nodes_config.cfg, and IMEX channels
# (/dev/nvidia-caps-imex-channels/channelN, created by hand: "not created by default",
# "will not persist through a reboot"), without which CUDA's multi-node memory calls fail
# with a permission error. `nvidia-imex-ctl -N -j` reports the domain: top-level "status"
# "UP", every node "READY", every connection "CONNECTED" (real GB200 output quoted in
# aws/aws-parallelcluster tests/integration-tests/tests/ultraserver/test_gb200.py @ 8a03c71).
IMEX_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"


def parse_nodes_config(text):
    """The node addresses of an IMEX nodes_config.cfg: one per line, comments and blanks
    skipped."""
    out = []
    for line in (text or "").splitlines():
        address = line.split("#", 1)[0].strip()
        if address:
            out.append(address)
    return out


def parse_imex_domain(text):
    """`nvidia-imex-ctl -N -j`: {status, nodes: [{index, host, status, version, connections:
    {peer index: status}}]}. Raises ValueError on output that is not that JSON."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise ValueError("no 'nodes' object in nvidia-imex-ctl -N -j output")
    nodes = []
    for index in sorted(data["nodes"], key=lambda k: int(k) if str(k).isdigit() else 0):
        node = data["nodes"][index] or {}
        links = node.get("connections") or {}
        nodes.append({"index": str(index), "host": node.get("host"),
                      "status": node.get("status"), "version": node.get("version"),
                      "connections": {str(peer): (link or {}).get("status")
                                      for peer, link in links.items()}})
    return {"status": data.get("status"), "nodes": nodes}


def _domain_problems(domain):
    problems = []
    if domain.get("status") != "UP":
        problems.append("domain %s" % (domain.get("status") or "status not reported"))
    hosts = dict((n["index"], n.get("host") or n["index"]) for n in domain.get("nodes") or [])
    for node in domain.get("nodes") or []:
        if node.get("status") != "READY":
            problems.append("node %s %s" % (node.get("host"), node.get("status")))
        for peer, status in sorted(node.get("connections", {}).items()):
            if status != "CONNECTED":
                problems.append("%s to %s %s" % (node.get("host"), hosts.get(peer, peer), status))
    return problems


def imex_checks(imex, exp):
    """The IMEX service of a multi-node NVLink node, against the plan's NVLink domain
    (``nvlink_domain_hosts``: every host of it). Nothing is judged on other profiles."""
    if not exp.get("multi_node_nvlink"):
        return []
    imex = imex or {}
    members = exp.get("nvlink_domain_hosts") or []
    out = []
    service = imex.get("service")
    out.append(check_result("imex_service", PASS if service == "active" else FAIL, service,
                            "active", "nvidia-imex running" if service == "active" else
                            "nvidia-imex is %s: CUDA cannot map memory across the NVLink domain "
                            "(the IMEX guide: start it before any CUDA job)"
                            % (service or "absent")))
    listed = imex.get("nodes_config")
    if listed is None:
        out.append(check_result("imex_nodes_config", FAIL, None, len(members),
                                "%s: %s" % (IMEX_NODES_CONFIG, imex.get("nodes_config_error")
                                            or "not readable")))
    else:
        ok = not members or len(listed) == len(members)
        out.append(check_result("imex_nodes_config", PASS if ok else FAIL, len(listed),
                                len(members),
                                "lists the domain's %d node(s)" % len(listed) if ok else
                                "%s lists %d node(s); the NVLink domain %s has %d (%s)"
                                % (IMEX_NODES_CONFIG, len(listed), exp.get("nvlink_domain"),
                                   len(members), ", ".join(members))))
    domain = imex.get("domain") or {}
    if domain.get("error"):
        out.append(check_result("imex_domain", FAIL, None, "UP",
                                "nvidia-imex-ctl -N -j: %s" % domain["error"]))
    else:
        problems = _domain_problems(domain)
        seen = len(domain.get("nodes") or [])
        if members and seen != len(members):
            problems.append("%d node(s) in the IMEX domain, %d planned" % (seen, len(members)))
        out.append(check_result("imex_domain", FAIL if problems else PASS,
                                domain.get("status"), "UP, every node READY and CONNECTED",
                                "; ".join(problems) if problems else
                                "%d node(s) READY, all connected" % seen))
    channels = imex.get("channels") or []
    out.append(check_result("imex_channel", PASS if channels else FAIL, channels, "channel0",
                            "IMEX channel(s) %s" % ", ".join(channels) if channels else
                            "no IMEX channel under %s: CUDA's multi-node memory calls fail with a "
                            "permission error (channels are not created by default nor kept over a "
                            "reboot)" % IMEX_CHANNELS))
    return out
