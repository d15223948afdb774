"""Run one of pair_evidence's modules in a play, as a role that depends on it would."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import REPO, run_local_play


def run_module(
    tmp_path: Path, module: str, args: dict[str, Any]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The play's run, and what the module returned ({} when it gave nothing)."""
    out = tmp_path / "module-result.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "roles": [{"role": str(REPO / "roles/pair_evidence")}],
            "tasks": [
                {module: args, "register": "returned"},
                {
                    "ansible.builtin.copy": {
                        "content": "{{ returned | to_json }}",
                        "dest": str(out),
                        "mode": "0644",
                    }
                },
            ],
        }
    ]
    result = run_local_play(tmp_path, play)
    returned = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    return result, returned
