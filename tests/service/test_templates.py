"""The units and env files vllm_tp2_service renders, from the role's own expressions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pair_doctor_collect as collect
import pytest

from tests.service.render import facts, render, systemd_argv, unit_lines, write_unit

SPARK: dict[str, Any] = {
    "spark_pair_name": "pair_one",
    "spark_pair_rank0_host": "spark-01",
    "vllm_tp2_service_image_ref": "ghcr.io/example/serving@sha256:" + "a" * 64,
    "vllm_tp2_service_model_path": "/var/lib/dualspark/models/x/rev",
    "vllm_tp2_service_api_key": "k" * 32,
    "vllm_tp2_service_master_address": "192.168.100.10",
    "rail_network_master_address": "192.168.100.10",
    "rail_network_socket_ifname": "enp1s0f1np1",
    "rail_network_ib_hca": "rocep1s0f1,roceP2p1s0f1",
    "rail_network_plan": {
        "twins": [
            {"interface": "enp1s0f1np1", "address": "192.168.100.10"},
            {"interface": "enP2p1s0f1np1", "address": "192.168.101.10"},
        ]
    },
    "rail_network_rdma_present": True,
    "container_runtime_gpu_enabled": True,
    "container_runtime_env": {"HF_HUB_OFFLINE": "1"},
    "dualpath_overlay_env": {"VLLM_PLUGINS": "dualpath", "PYTHONPATH": "/opt/vllm_dualpath/site"},
    "dualpath_overlay_mounts": [
        {"source": "/opt/dualspark/overlay/current", "target": "/opt/vllm_dualpath"}
    ],
}
LAB: dict[str, Any] = {
    **SPARK,
    "rail_network_ib_hca": "",
    "rail_network_rdma_present": False,
    "container_runtime_gpu_enabled": False,
    "vllm_tp2_service_host_container": "dualspark-lab-spark-a",
    "vllm_tp2_service_memlock": "",
    "vllm_tp2_service_docker_unit": "",
    "vllm_tp2_service_drop_caches": False,
    "vllm_tp2_service_engine_root": {"stdout": "/var/lib/docker/overlay2/abc/merged\n"},
}


def rank(inventory: dict[str, Any], number: int) -> dict[str, Any]:
    published = facts({**inventory, "spark_pair_rank": number})
    return {**published, "ansible_managed": "Ansible managed"}


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_spark_rank0_container_has_rail_gpu_and_rdma_but_no_privileges() -> None:
    args = rank(SPARK, 0)["vllm_tp2_service_run_args"]
    assert "--privileged" not in args
    assert option(args, "--network") == "host"
    assert option(args, "--ipc") == "host"
    assert option(args, "--cap-add") == "IPC_LOCK"
    assert option(args, "--ulimit") == "memlock=-1:-1"
    assert option(args, "--device") == "/dev/infiniband"
    assert option(args, "--gpus") == "all"
    mounts = [args[i + 1] for i, arg in enumerate(args) if arg == "--mount"]
    assert mounts == [
        "type=bind,src=/var/lib/dualspark/models/x/rev,dst=/model,readonly",
        "type=bind,src=/opt/dualspark/overlay/current,dst=/opt/vllm_dualpath,readonly",
        "type=bind,src=/var/cache/dualspark/jit/triton,dst=/root/.triton",
        "type=bind,src=/var/cache/dualspark/jit/flashinfer,dst=/root/.cache/flashinfer",
        "type=bind,src=/var/cache/dualspark/jit/b12x,dst=/root/.cache/b12x",
        "type=bind,src=/var/cache/dualspark/jit/vllm,dst=/root/.cache/vllm",
        "type=bind,src=/var/lib/dualspark/overlay-calls/vllm-tp2-rank0,dst=/var/lib/dualpath-calls",
    ]
    env_files = [args[i + 1] for i, arg in enumerate(args) if arg == "--env-file"]
    assert env_files == [
        "/etc/dualspark/vllm-tp2-rank0.env",
        "/run/dualspark/vllm-tp2-rank0.rail.env",
    ], "the GID index comes from the file written at start, after the static one"


def test_dflash_mounts_the_drafter_and_names_it() -> None:
    drafter = {
        **SPARK,
        "vllm_tp2_service_speculative_method": "dflash",
        "model_weights_draft_path": "/var/lib/dualspark/models/draft/rev",
    }
    args = rank(drafter, 1)["vllm_tp2_service_run_args"]
    assert "type=bind,src=/var/lib/dualspark/models/draft/rev,dst=/draft,readonly" in args
    assert json.loads(option(args, "--speculative-config")) == {
        "method": "dflash",
        "model": "/draft",
        "num_speculative_tokens": 7,
    }


def test_the_nodes_nccl_is_mounted_over_the_images_and_the_doctor_sees_it() -> None:
    system = {**SPARK, "vllm_tp2_service_system_nccl": "/usr/lib/aarch64-linux-gnu/libnccl.so.2"}
    args = rank(system, 0)["vllm_tp2_service_run_args"]
    nccl = (
        "type=bind,src=/usr/lib/aarch64-linux-gnu/libnccl.so.2,"
        "dst=/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2,readonly"
    )
    assert nccl in args
    assert collect.SYSTEM_NCCL_MOUNT.search(" ".join(args) + " ")
    default = rank(SPARK, 0)["vllm_tp2_service_run_args"]
    assert not any("libnccl" in arg for arg in default)
    assert not collect.SYSTEM_NCCL_MOUNT.search(" ".join(default) + " ")


def test_no_speculative_config_without_a_method() -> None:
    args = rank({**SPARK, "vllm_tp2_service_speculative_method": "none"}, 0)
    assert "--speculative-config" not in args["vllm_tp2_service_run_args"]


def test_serve_arguments_carry_the_reference_configuration() -> None:
    args = rank(SPARK, 0)["vllm_tp2_service_run_args"]
    serve = args[args.index("vllm") :]
    assert serve[:3] == ["vllm", "serve", "/model"]
    assert args[args.index("vllm") - 1] == SPARK["vllm_tp2_service_image_ref"]
    assert option(serve, "--tensor-parallel-size") == "2"
    assert option(serve, "--nnodes") == "2"
    assert option(serve, "--node-rank") == "0"
    assert option(serve, "--master-addr") == "192.168.100.10"
    assert option(serve, "--max-model-len") == "524288"
    assert option(serve, "--kv-cache-dtype") == "fp8_ds_mla"
    assert option(serve, "--linear-backend") == "marlin"
    assert option(serve, "--shutdown-timeout") == "120"
    assert option(serve, "--gpu-memory-utilization") == "0.85"
    assert option(serve, "--max-num-batched-tokens") == "8192"
    assert json.loads(option(serve, "--speculative-config")) == {
        "method": "mtp",
        "num_speculative_tokens": 4,
    }
    assert "--headless" not in serve
    assert "--api-key" not in serve, "the key travels in the env file, not on the command line"


def test_rank1_is_headless_without_api_or_key() -> None:
    published = rank(SPARK, 1)
    serve = published["vllm_tp2_service_run_args"]
    assert "--headless" in serve
    assert "--port" not in serve
    assert option(serve, "--node-rank") == "1"
    assert "VLLM_API_KEY" not in published["vllm_tp2_service_container_env"]


def test_env_carries_rail_overlay_and_runtime_settings() -> None:
    env = rank(SPARK, 0)["vllm_tp2_service_container_env"]
    assert env["VLLM_API_KEY"] == "k" * 32
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert "NCCL_IB_GID_INDEX" not in env, "found at every start, not fixed at deploy time"
    assert env["VLLM_HOST_IP"] == "192.168.100.10"
    assert "VLLM_TEST_FORCE_FP8_MARLIN" not in env, "vLLM 0.33/0.34 do not read it"
    assert env["DUALPATH_STATS_DIR"] == "/var/lib/dualpath-calls"
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert env["VLLM_PLUGINS"] == "dualpath"
    assert env["HF_HUB_OFFLINE"] == "1"


def test_lab_joins_the_host_namespace_and_mounts_through_its_root() -> None:
    published = rank(LAB, 0)
    args = published["vllm_tp2_service_run_args"]
    assert option(args, "--network") == "container:dualspark-lab-spark-a"
    for flag in ("--ulimit", "--device", "--gpus", "--runtime"):
        assert flag not in args
    mounts = [args[i + 1] for i, arg in enumerate(args) if arg == "--mount"]
    assert all(m.startswith("type=bind,src=/var/lib/docker/overlay2/abc/merged/") for m in mounts)
    env = published["vllm_tp2_service_container_env"]
    assert "NCCL_IB_HCA" not in env, "no RDMA device: leave NCCL's HCA choice alone"


@pytest.mark.parametrize("inventory", [SPARK, LAB], ids=["spark", "lab"])
@pytest.mark.parametrize("number", [0, 1])
def test_unit_exec_start_parses_back_to_the_arguments(
    inventory: dict[str, Any], number: int
) -> None:
    published = rank(inventory, number)
    unit = unit_lines(render("vllm-tp2.service.j2", published))
    (exec_start,) = unit["ExecStart"]
    assert systemd_argv(exec_start) == published["vllm_tp2_service_run_args"]
    assert unit["Restart"] == ["no"]
    assert int(unit["TimeoutStartSec"][0]) >= 600, "loads take minutes"
    assert ("ExecStartPost" in unit) == (number == 0)
    stop = systemd_argv(unit["ExecStop"][0])
    assert stop[1:4] == ["stop", "--time", "150"], "longer than the drain, never cutting it"
    assert int(unit["TimeoutStopSec"][0]) > 150
    pre = [systemd_argv(line) for line in unit["ExecStartPre"]]
    (gid,) = [argv for argv in pre if argv[1].endswith("rail_gid_env.py")]
    addresses = [gid[i + 1] for i, arg in enumerate(gid) if arg == "--address"]
    assert addresses == [twin["address"] for twin in published["rail_network_plan"]["twins"]], (
        "every rail address of this node"
    )
    assert gid[gid.index("--out") + 1] == f"/run/dualspark/vllm-tp2-rank{number}.rail.env"


def test_readiness_wait_keeps_the_key_out_of_the_command_line(tmp_path: Path) -> None:
    # A stand-in for curl (no server here) records the command line and the config it was given.
    curl = tmp_path / "curl"
    curl.write_text('#!/bin/sh\necho "$@" > "$0.argv"; cat > "$0.stdin"\n', encoding="utf-8")
    curl.chmod(0o755)
    published = rank(SPARK, 0) | {"vllm_tp2_service_curl": str(curl)}
    unit = unit_lines(render("vllm-tp2.service.j2", published))
    (post,) = unit["ExecStartPost"]
    assert "k" * 32 not in post
    argv = systemd_argv(post)
    assert argv[:2] == ["/bin/sh", "-c"]
    assert "kill -0 $MAINPID" in argv[2]
    key = "Key.with_all-the~allowed+chars/=0123456789"
    env = {"PATH": os.environ["PATH"], "VLLM_API_KEY": key, "MAINPID": str(os.getpid())}
    subprocess.run(argv, env=env, check=True, timeout=30)
    curl_argv = (tmp_path / "curl.argv").read_text(encoding="utf-8")
    assert key not in curl_argv and "/v1/models" in curl_argv
    assert (tmp_path / "curl.stdin").read_text(encoding="utf-8") == (
        f'header = "Authorization: Bearer {key}"'
    )


def test_env_file_lists_every_variable_once() -> None:
    published = rank(SPARK, 0)
    text = render("vllm-tp2.env.j2", published)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert dict(line.split("=", 1) for line in lines) == published["vllm_tp2_service_container_env"]
    assert len(lines) == len(published["vllm_tp2_service_container_env"])


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("number", [0, 1])
def test_systemd_accepts_the_unit(tmp_path: Path, number: int) -> None:
    published = rank(LAB, number)
    docker = shutil.which("docker") or "/bin/true"
    published["vllm_tp2_service_docker"] = docker
    published["vllm_tp2_service_run_args"] = [docker, *published["vllm_tp2_service_run_args"][1:]]
    path = write_unit(
        tmp_path, f"vllm-tp2-rank{number}.service", render("vllm-tp2.service.j2", published)
    )
    result = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False
    )
    mine = [line for line in result.stderr.splitlines() if path.name in line]
    assert result.returncode == 0 and not mine, result.stderr


def test_the_container_carries_its_record_which_any_change_changes() -> None:
    base = rank(SPARK, 0)
    args = base["vllm_tp2_service_run_args"]
    assert option(args, "--label") == f"dualspark.record={base['vllm_tp2_service_record']}"
    assert args.index("--label") < args.index(SPARK["vllm_tp2_service_image_ref"])
    assert rank(SPARK, 0)["vllm_tp2_service_record"] == base["vllm_tp2_service_record"]
    release = {**SPARK["dualpath_overlay_env"], "DUALPATH_RELEASE": "0.1.0-0123456789ab"}
    changes = {
        "setting": {"vllm_tp2_service_max_num_seqs": 5},
        "release": {"dualpath_overlay_env": release},
        "image": {"vllm_tp2_service_image_ref": "ghcr.io/example/serving@sha256:" + "b" * 64},
        "environment": {"vllm_tp2_service_extra_env": {"NCCL_DEBUG": "WARN"}},
    }
    for what, change in changes.items():
        changed = rank({**SPARK, **change}, 0)["vllm_tp2_service_record"]
        assert changed != base["vllm_tp2_service_record"], what
    assert rank(SPARK, 1)["vllm_tp2_service_record"] != base["vllm_tp2_service_record"]
