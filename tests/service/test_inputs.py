"""vllm_tp2_service's inputs from the other roles (defaults/main.yml, tasks/inputs.yml): taken from
their facts, and a missing one named with the role and playbook that provide it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, output_of, run_local_play

# What spark_pair, container_runtime, model_weights, rail_network and dualpath_overlay publish.
FACTS: dict[str, Any] = {
    "spark_pair_rank": 0,
    "spark_pair_rank0_host": "localhost",
    "container_runtime_image_ref": "registry.example/vllm@sha256:" + "4" * 64,
    "model_weights_path": "/var/lib/dualspark/models/glm/" + "0" * 40,
    "rail_network_master_address": "192.168.100.10",
    "dualpath_overlay_env": {"DUALPATH_RELEASE": "0.1.0-9eb9a229b23d", "DUALPATH_ENABLED": "1"},
    "dualpath_overlay_mounts": [
        {"source": "/opt/dualspark/overlay/current", "target": "/opt/vllm_dualpath"}
    ],
    "dualpath_overlay_current_path": "/opt/dualspark/overlay/current",
}


def check_inputs(tmp_path: Path, facts: dict[str, Any]) -> tuple[int, str, str | None]:
    out = tmp_path / "declared.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {"ansible.builtin.set_fact": facts},
                {
                    "ansible.builtin.include_role": {
                        "name": str(REPO / "roles/vllm_tp2_service"),
                        "tasks_from": "inputs.yml",
                    }
                },
                {
                    "ansible.builtin.copy": {
                        "dest": str(out),
                        "mode": "0600",
                        "content": "{{ vllm_tp2_service_declared_release | to_json }}",
                    }
                },
            ],
        }
    ]
    result = run_local_play(tmp_path, play)
    declared = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    return result.returncode, output_of(result, 80), declared


def test_the_other_roles_facts_are_the_inputs(tmp_path: Path) -> None:
    code, output, declared = check_inputs(tmp_path, FACTS)
    assert code == 0, output
    assert declared == "0.1.0-9eb9a229b23d"


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        (
            "model_weights_path",
            "the checkpoint directory (vllm_tp2_service_model_path) is missing on localhost: "
            "model_weights publishes model_weights_path",
        ),
        (
            "dualpath_overlay_env",
            "the overlay's settings, mounts and path (vllm_tp2_service_overlay_env, _mounts, "
            "_path) is missing on localhost: dualpath_overlay publishes dualpath_overlay_env",
        ),
        (
            "container_runtime_image_ref",
            "the pinned image (vllm_tp2_service_image_ref) is missing on localhost: "
            "container_runtime publishes container_runtime_image_ref",
        ),
    ],
)
def test_a_missing_input_is_named_with_its_provider(
    tmp_path: Path, missing: str, named: str
) -> None:
    facts = {name: value for name, value in FACTS.items() if name != missing}
    code, output, declared = check_inputs(tmp_path, facts)
    assert code != 0
    assert named in " ".join(output.split()), output
    assert declared is None
