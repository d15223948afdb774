"""The inventories the repository ships pass the check: the lab's (in a copy, so that its
lookups read and write under the copy's .cache/), and the production example once what it leaves
empty on purpose is given (the API key from the environment, the image digest and the checkpoint
revision). As shipped, the example is refused for exactly those three. The four runs start
together."""

from __future__ import annotations

import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO
from tests.inventory_check.conftest import (
    DIGEST,
    REVISION,
    Run,
    flat,
    problems,
    start_playbook,
)

PRODUCTION = REPO / "inventory/production/hosts.yml"
KEY = "DUALSPARK_API_KEY=made-up-key-for-the-test-0123456789"


def lab_copy(tmp_path: Path, image_id: str | None) -> Path:
    """inventory/lab under tmp_path/inventory/lab; its lookups use tmp_path/.cache/lab/."""
    shutil.copytree(REPO / "inventory/lab", tmp_path / "inventory/lab")
    if image_id is not None:
        (tmp_path / ".cache/lab").mkdir(parents=True)
        (tmp_path / ".cache/lab/standin-image.id").write_text(image_id + "\n", encoding="utf-8")
    return tmp_path / "inventory/lab/hosts.yml"


@pytest.fixture(scope="module")
def runs(
    pool: ThreadPoolExecutor, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Run]]:
    """Each run of this module (with the directory its lab copy is in), started together."""
    lab = tmp_path_factory.mktemp("lab")
    lab_without_id = tmp_path_factory.mktemp("lab_without_id")
    started: dict[str, tuple[Path, Future[Run]]] = {
        "lab": (
            lab,
            start_playbook(pool, lab_copy(lab, DIGEST), "-e", "inventory_check_strict=true"),
        ),
        "lab_without_id": (lab_without_id, start_playbook(pool, lab_copy(lab_without_id, None))),
        "production_filled": (
            REPO,
            start_playbook(
                pool,
                PRODUCTION,
                "-e",
                f"container_runtime_image_digest={DIGEST}",
                "-e",
                f"model_weights_revision={REVISION}",
                "-e",
                "inventory_check_strict=true",
                env=(KEY,),
            ),
        ),
        "production_as_shipped": (
            REPO,
            start_playbook(pool, PRODUCTION, env=("DUALSPARK_API_KEY=",)),
        ),
    }
    return {name: (where, future.result()) for name, (where, future) in started.items()}


def test_the_lab_inventory_passes(runs: dict[str, tuple[Path, Run]]) -> None:
    tmp_path, result = runs["lab"]
    output = flat(result)
    assert result.returncode == 0, output
    assert "[WARNING]" not in output, output
    for task in ("Check the twins, rail addresses and MTU of every pair", "Check the API key"):
        assert task in output, output
    # the lab's key was made where its inventory points, not in the repository's .cache
    assert (tmp_path / ".cache/lab/api-key").is_file()


def test_the_lab_without_its_image_id_says_what_is_missing(
    runs: dict[str, tuple[Path, Run]],
) -> None:
    result = runs["lab_without_id"][1]
    assert result.returncode != 0, flat(result)
    found = problems(result)
    assert len(found) == 1, found
    assert found[0].startswith(
        "container_runtime_image_digest (spark-a, spark-b, spark-c, spark-d): "
        "cannot be evaluated on the controller"
    ), found
    assert "standin-image.id" in found[0], found


def test_the_production_example_leaves_the_pins_empty_on_purpose() -> None:
    group_vars = REPO / "inventory/production/group_vars/all"
    runtime = yaml.safe_load((group_vars / "container_runtime.yml").read_text(encoding="utf-8"))
    weights = yaml.safe_load((group_vars / "model_weights.yml").read_text(encoding="utf-8"))
    service = (group_vars / "vllm_tp2_service.yml").read_text(encoding="utf-8")
    assert runtime["container_runtime_image_digest"] == ""
    assert weights["model_weights_revision"] == ""
    assert "DUALSPARK_API_KEY" in service


def test_the_production_example_passes_once_filled_in(
    runs: dict[str, tuple[Path, Run]],
) -> None:
    result = runs["production_filled"][1]
    output = flat(result)
    assert result.returncode == 0, output
    assert "[WARNING]" not in output, output
    assert "made-up-key-for-the-test" not in output, output


def test_the_production_example_as_shipped_is_refused_for_what_it_leaves_empty(
    runs: dict[str, tuple[Path, Run]],
) -> None:
    result = runs["production_as_shipped"][1]
    assert result.returncode != 0, flat(result)
    found = problems(result)
    assert [message.split(":", 1)[0] for message in found] == [
        "container_runtime_image_digest (spark-01, spark-02)",
        "vllm_tp2_service_api_key (spark-01)",
        "model_weights_revision (spark-01, spark-02)",
    ], found
    assert "DUALSPARK_API_KEY" in found[1]
