"""Observations of a healthy Spark pair in pair_doctor_collect.py's format, with NCCL's transport as
the judge module reads it from their NCCL lines (a sample, not a recording)."""

from __future__ import annotations

import copy
from typing import Any

from pair_evidence.readings import nccl_log_reading

IMAGE_ID = "sha256:4b1d3c0f9a8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170a1b2c"
IB_LOG = [
    "spark-01:4211:4342 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE"
    " [RO]; OOB enp1s0f1np1:192.168.100.10<0>",
    "spark-01:4211:4342 [0] NCCL INFO Using network IB",
    "spark-01:4211:4351 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
]


def _gids(ipv4: str, ndev: str) -> list[dict[str, Any]]:
    a, b, c, d = (int(part) for part in ipv4.split("."))
    mapped = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    return [
        {
            "index": 0,
            "gid": "fe80:0000:0000:0000:4ebb:47ff:fe01:0203",
            "type": "IB/RoCE v1",
            "ndev": ndev,
        },
        {
            "index": 1,
            "gid": "fe80:0000:0000:0000:4ebb:47ff:fe01:0203",
            "type": "RoCE v2",
            "ndev": ndev,
        },
        {"index": 2, "gid": mapped, "type": "IB/RoCE v1", "ndev": ndev},
        {"index": 3, "gid": mapped, "type": "RoCE v2", "ndev": ndev},
    ]


def node(rank: int, epoch: float = 1_796_215_000.0) -> dict[str, Any]:
    first, second = f"192.168.100.{10 + rank}", f"192.168.101.{10 + rank}"
    unit = f"dualspark-vllm-rank{rank}.service"
    return {
        "hostname": f"spark-0{rank + 1}",
        "clock": {"epoch": epoch + 0.05 * rank, "ntp_synchronized": True},
        "interfaces": {
            "enp1s0f1np1": {"present": True, "mtu": 9000, "operstate": "up", "ipv4": [first]},
            "enP2p1s0f1np1": {"present": True, "mtu": 9000, "operstate": "up", "ipv4": [second]},
        },
        "rdma": {
            "present": True,
            "devices": {
                "rocep1s0f1": {
                    "netdevs": ["enp1s0f1np1"],
                    "ports": {
                        "1": {
                            "state": "4: ACTIVE",
                            "link_layer": "Ethernet",
                            "gids": _gids(first, "enp1s0f1np1"),
                        }
                    },
                },
                "roceP2p1s0f1": {
                    "netdevs": ["enP2p1s0f1np1"],
                    "ports": {
                        "1": {
                            "state": "4: ACTIVE",
                            "link_layer": "Ethernet",
                            "gids": _gids(second, "enP2p1s0f1np1"),
                        }
                    },
                },
            },
        },
        "memory": {
            "MemTotal_kb": 127_535_000,
            "MemAvailable_kb": 119_000_000,
            "CmaTotal_kb": 65536,
            "CmaFree_kb": 60000,
        },
        "memlock": {"soft_bytes": None, "hard_bytes": None},
        "service_env": {
            "/etc/dualspark/vllm.env": {
                "NCCL_IB_GID_INDEX": "3",
                "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
            }
        },
        "units": {
            unit: {
                "loaded": True,
                "active": False,
                "memlock_unlimited": True,
                "ipc_lock": True,
                "infiniband_device": True,
                "system_nccl_mounted": True,
                "nccl_log": list(IB_LOG),
                "hang_lines": [],
            }
        },
        "nccl_transport": nccl_log_reading(IB_LOG),
        "platform": {
            "now": {
                "kernel": "6.17.0-1008-nvidia",
                "gpu_driver": "580.95.05",
                "rdma_firmware": {"rocep1s0f1": "28.45.1020", "roceP2p1s0f1": "28.45.1020"},
            },
            "since_validated": [],
        },
        "image": {
            "ref": "ghcr.io/example/vllm@sha256:abc",
            "present": True,
            "id": IMAGE_ID,
            "repo_digests": [],
            "nccl_conf": None,
            "nccl_conf_probe_ok": True,
        },
    }


def healthy_pair() -> dict[str, dict[str, Any]]:
    return {"spark-01": node(0), "spark-02": node(1)}


def lab_pair() -> dict[str, dict[str, Any]]:
    """The lab: no RDMA, a kernel without CMA, a stand-in service whose log has no NCCL lines."""
    pair = copy.deepcopy(healthy_pair())
    for observed in pair.values():
        observed["rdma"] = {"present": False, "devices": {}}
        observed["memory"].update(CmaTotal_kb=None, CmaFree_kb=None)
        for unit in observed["units"].values():
            unit["nccl_log"] = []
            unit["system_nccl_mounted"] = False  # the stand-in's image has no pip NCCL to replace
        observed["nccl_transport"] = nccl_log_reading([])
    return pair


def running_pair(index: str = "3") -> dict[str, dict[str, Any]]:
    """The service running, each unit having written the GID index it found at its start to a
    runtime env file the container reads after the static one (which pins nothing)."""
    pair = copy.deepcopy(healthy_pair())
    for rank, observed in enumerate(pair.values()):
        observed["service_env"]["/etc/dualspark/vllm.env"].pop("NCCL_IB_GID_INDEX")
        observed["service_runtime_env"] = {
            f"/run/dualspark/vllm-tp2-rank{rank}.rail.env": {"NCCL_IB_GID_INDEX": index}
        }
        for unit in observed["units"].values():
            unit["active"] = True
    return pair
