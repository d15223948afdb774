"""calibrate.yml on a node: skips without a GPU, measures once per key, reuses across releases,
never measures a busy GPU (nvidia-smi and docker are test doubles: there is no GPU here)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import stat
from pathlib import Path

import pytest

from tests.dualpath_overlay.calibration_doubles import DOCKER, NVIDIA_SMI
from tests.helpers import REPO, output_of, run_local_play

PACKAGE = REPO / "files/vllm_dualpath/src/vllm_dualpath"


def _served_config() -> dict:
    """GLM-5.3-Flash's config, as the overlay's own shape tests have it."""
    path = REPO / "files/vllm_dualpath/tests/model_configs.py"
    spec = importlib.util.spec_from_file_location("overlay_model_configs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.GLM53_FLASH)


GLM53_FLASH = _served_config()


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        executable(self.bin / "nvidia-smi", NVIDIA_SMI)
        self.docker = executable(self.bin / "docker", DOCKER)
        self.gpu = root / "nvidiactl"
        self.gpu.touch()
        self.model = root / "model"
        self.model.mkdir()
        self.write_config(GLM53_FLASH)
        self.overlay = root / "overlay"
        for release in ("0.1.0-aaa", "0.1.1-bbb"):
            shutil.copytree(PACKAGE, self.overlay / "releases" / release / "site/vllm_dualpath")
        (self.overlay / "current").symlink_to(self.overlay / "releases/0.1.0-aaa")

    def write_config(self, config: dict) -> None:
        (self.model / "config.json").write_text(json.dumps(config))

    def docker_calls(self) -> int:
        log = self.bin / "docker-calls"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def run(self, release: str = "0.1.0-aaa", **overrides: str):
        variables = {
            "dualpath_overlay_root": str(self.overlay),
            "dualpath_overlay_gpu_device": str(self.gpu),
            "dualpath_overlay_model_path": str(self.model),
            "dualpath_overlay_current_release": release,
            "dualpath_overlay_image_ref": "registry.example/vllm@sha256:" + "0" * 64,
            "dualpath_overlay_docker": str(self.docker),
            "dualpath_overlay_calibration_max_m": 8192,
            **overrides,
        }
        play = {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Calibrate",
                    "ansible.builtin.include_role": {
                        "name": "dualpath_overlay",
                        "tasks_from": "calibrate.yml",
                    },
                    "vars": variables,
                }
            ],
        }
        result = run_local_play(
            self.root / "play",
            [play],
            f"ANSIBLE_ROLES_PATH={REPO / 'roles'}",
            f"PATH={self.bin}:{REPO / '.venv/bin'}:/usr/bin:/bin",
        )
        assert result.returncode == 0, output_of(result)
        changed = re.search(r"changed=(\d+)", result.stdout)
        assert changed, output_of(result)
        return int(changed.group(1)), result.stdout

    def table(self, release: str) -> dict:
        return json.loads((self.overlay / "calibration" / f"{release}.json").read_text())


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_a_node_without_a_gpu_says_so_and_measures_nothing(node: Node) -> None:
    node.gpu.unlink()
    changed, output = node.run()
    assert "not calibrated (no GPU" in output and "thresholds" in output
    assert node.docker_calls() == 0 and changed == 0
    assert not (node.overlay / "calibration").exists()


def test_a_node_with_a_gpu_measures_once_then_reuses_across_releases(node: Node) -> None:
    changed, output = node.run()
    assert node.docker_calls() == 1 and changed > 0
    assert "wrote /calibration/tables/" in output
    table = node.table("0.1.0-aaa")
    assert table["key"]["gpu"] == "NVIDIA GB10" and table["key"]["driver"] == "580.95.05"
    assert {tuple(pair) for pair in table["key"]["shapes"]} == {
        (12288, 4096),
        (4096, 6144),
        (2048, 4096),
        (4096, 1024),
        (77440, 4096),
    }
    changed, _ = node.run()
    assert (changed, node.docker_calls()) == (0, 1)
    changed, _ = node.run(release="0.1.1-bbb")  # same kernels: the update pays nothing
    assert (changed, node.docker_calls()) == (1, 1)
    assert node.table("0.1.1-bbb") == table


def test_another_model_is_measured_again_but_never_beside_a_busy_gpu(node: Node) -> None:
    node.run()
    node.write_config({**GLM53_FLASH, "vocab_size": 200000})
    (node.bin / "busy").write_text("4242\n")
    changed, output = node.run()
    assert node.docker_calls() == 1 and changed == 0
    assert "GPU is in use" in output and "4242" in output
    (node.bin / "busy").unlink()
    node.run()
    assert node.docker_calls() == 2
    assert [100000, 4096] in node.table("0.1.0-aaa")["key"]["shapes"]


def test_a_node_without_a_verified_checkpoint_says_so(node: Node) -> None:
    changed, output = node.run(dualpath_overlay_model_path="")
    assert "no verified checkpoint" in output and node.docker_calls() == 0 and changed == 0
