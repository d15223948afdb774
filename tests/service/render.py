"""Evaluate the vllm_tp2_service role's own expressions and templates with Ansible's Templar."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from tests.ansible_trust import evaluate, render_template
from tests.helpers import REPO

ROLE = REPO / "roles/vllm_tp2_service"


def configure_task() -> dict[str, Any]:
    tasks = yaml.safe_load((ROLE / "tasks/facts.yml").read_text(encoding="utf-8"))
    (task,) = [
        t for t in tasks if "vllm_tp2_service_run_args" in t.get("ansible.builtin.set_fact", {})
    ]
    return task


def facts(inventory: dict[str, Any]) -> dict[str, Any]:
    """The facts facts.yml's set_fact publishes, for role defaults plus `inventory` (role vars
    win over both, as in Ansible)."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text(encoding="utf-8"))
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text(encoding="utf-8"))
    task = configure_task()
    published = evaluate(
        task["ansible.builtin.set_fact"], {**defaults, **task["vars"], **inventory, **role_vars}
    )
    return {**defaults, **inventory, **role_vars, **published}


def render(template: str, variables: dict[str, Any]) -> str:
    return render_template(ROLE / "templates" / template, variables)


def unit_lines(unit: str) -> dict[str, list[str]]:
    """Key -> values of a unit file, continuation lines joined."""
    joined = unit.replace("\\\n", "")
    entries: dict[str, list[str]] = {}
    for line in joined.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            entries.setdefault(key, []).append(value)
    return entries


def systemd_argv(command: str) -> list[str]:
    """Split an Exec line the way systemd does for the quoting the template uses."""
    return [arg.replace("%%", "%").replace("$$", "$") for arg in shlex.split(command.lstrip("-"))]


def write_unit(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


PRODUCTION = REPO / "inventory/production"
# What the other roles publish on a Spark of the production example: the rail facts as
# rail_network would find them (DGX OS names of the twins' RDMA devices), the pinned image, the
# verified checkpoint and the overlay's current release.
PRODUCTION_FACTS: dict[str, Any] = {
    "rail_network_ib_hca": "rocep1s0f1,roceP2p1s0f1",
    "rail_network_rdma_present": True,
    "container_runtime_gpu_enabled": True,
    "container_runtime_image_ref": "ghcr.io/entrpi/glm-5.3-flash-exl3-2x-spark@sha256:" + "4" * 64,
    "model_weights_path": "/var/lib/dualspark/models/glm/" + "0" * 40,
    "dualpath_overlay_env": {
        "VLLM_PLUGINS": "dualpath",
        "PYTHONPATH": "/opt/vllm_dualpath/site",
        "DUALPATH_ENABLED": "1",
    },
    "dualpath_overlay_mounts": [
        {"source": "/opt/dualspark/overlay/current", "target": "/opt/vllm_dualpath"}
    ],
    "vllm_tp2_service_api_key": "k" * 32,
}


def _yaml_files(directory: Path) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in sorted(directory.glob("*.yml")):
        merged.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return merged


def production_host(name: str) -> dict[str, Any]:
    """One host of inventory/production with its group and host vars and the facts other roles
    publish (lookups in the inventory replaced by PRODUCTION_FACTS)."""
    hosts = yaml.safe_load((PRODUCTION / "hosts.yml").read_text(encoding="utf-8"))
    pair_name, pair = next(iter(hosts["dualspark"]["children"].items()))
    host = {
        **_yaml_files(PRODUCTION / "group_vars/all"),
        **_yaml_files(PRODUCTION / "group_vars" / pair_name),
        **_yaml_files(PRODUCTION / "host_vars" / name),
        **pair["hosts"][name],
        **PRODUCTION_FACTS,
    }
    twins = [
        {**twin, "address": host["rail_network_addresses"][twin["interface"]]}
        for twin in host["rail_network_twins"]
    ]
    ranks = {vars_["spark_pair_rank"]: host_name for host_name, vars_ in pair["hosts"].items()}
    return {
        **host,
        "inventory_hostname": name,
        "spark_pair_rank0_host": ranks[0],
        "spark_pair_rank1_host": ranks[1],
        "rail_network_plan": {"twins": twins},
        "rail_network_master_address": twins[0]["address"],
        "rail_network_socket_ifname": twins[0]["interface"],
    }


def production_rank(number: int) -> dict[str, Any]:
    """The published facts of the production example's rank `number`, ready to render."""
    hosts = {name: production_host(name) for name in ("spark-01", "spark-02")}
    (name,) = [n for n, h in hosts.items() if h["spark_pair_rank"] == number]
    published = facts({**hosts[name], "hostvars": hosts})
    return {**published, "ansible_managed": "Ansible managed"}
