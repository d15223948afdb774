"""container_runtime's image step when the pinned image cannot be had: the play stops with what
was tried and how to fix it. A stand-in docker (no registry here) has no image and refuses pulls."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, output_of, run_local_play

DIGEST = "sha256:" + "0" * 64


def run_image_step(tmp_path: Path, pull: bool) -> str:
    docker = tmp_path / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  image) echo "Error: No such image" >&2 ;;\n'
        '  pull) echo "pull access denied for registry.example:5000/team/vllm" >&2 ;;\n'
        "esac\n"
        "exit 1\n"
    )
    docker.chmod(0o755)
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": "container_runtime",
                        "tasks_from": "image.yml",
                    },
                    "vars": {
                        "container_runtime_image": "registry.example:5000/team/vllm:0.33",
                        "container_runtime_image_digest": DIGEST,
                        "container_runtime_pull": pull,
                        "container_runtime_copy_from_peer": False,
                        "container_runtime_docker": str(docker),
                    },
                }
            ],
        }
    ]
    result = run_local_play(tmp_path, play, f"ANSIBLE_ROLES_PATH={REPO / 'roles'}")
    output = " ".join(output_of(result, 100).split())
    assert result.returncode != 0, output
    return output


@pytest.mark.parametrize("pull", [True, False])
def test_a_missing_image_stops_the_play_saying_what_was_tried(tmp_path: Path, pull: bool) -> None:
    output = run_image_step(tmp_path, pull)
    # the registry's port survives pinning by digest
    assert f"registry.example:5000/team/vllm@{DIGEST} is not on localhost" in output, output
    tried = "pull: pull access denied" if pull else "not pulled (container_runtime_pull is off"
    assert tried in output, output
    assert "not copied from the peer (container_runtime_copy_from_peer is off)" in output, output
