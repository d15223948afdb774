"""The generated stand-in repository is deterministic, so the lab can pin its revision."""

from __future__ import annotations

import re

import yaml

from lab import make_checkpoint
from tests.helpers import REPO


def test_seed_1_gives_the_revision_the_lab_pins(tmp_path):
    assert make_checkpoint.main(["--out", str(tmp_path), "--seed", "1"]) == 0
    api = yaml.safe_load((tmp_path / "api.json").read_text(encoding="utf-8"))
    lab = yaml.safe_load(
        (REPO / "inventory/lab/group_vars/all/model_weights.yml").read_text(encoding="utf-8")
    )
    scenario = yaml.safe_load(
        (REPO / "molecule/model_weights/molecule.yml").read_text(encoding="utf-8")
    )
    pinned = scenario["provisioner"]["inventory"]["group_vars"]["lab_pair"][
        "model_weights_revision"
    ]
    assert api["sha"] == lab["model_weights_revision"] == pinned
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == sorted(
        s["rfilename"] for s in api["siblings"]
    )


def test_other_seeds_give_other_revisions(tmp_path):
    first = make_checkpoint.generate(tmp_path / "a", seed=2, shards=2, shard_bytes=4096)
    second = make_checkpoint.generate(tmp_path / "b", seed=3, shards=2, shard_bytes=4096)
    assert first["sha"] != second["sha"]


def test_drafter_seed_1_gives_the_revision_the_scenario_pins(tmp_path):
    argv = ["--out", str(tmp_path), "--seed", "1", "--single-file", "--shard-mib", "1"]
    assert make_checkpoint.main([*argv, "--repo-id", "stand-in/drafter"]) == 0
    api = yaml.safe_load((tmp_path / "api.json").read_text(encoding="utf-8"))
    scenario = yaml.safe_load(
        (REPO / "molecule/model_weights/molecule.yml").read_text(encoding="utf-8")
    )
    lab_pair = scenario["provisioner"]["inventory"]["group_vars"]["lab_pair"]
    assert api["sha"] == lab_pair["model_weights_draft_revision"]
    assert api["id"] == lab_pair["model_weights_draft_repo_id"]
    # The lab inventory offers the same drafter, commented out.
    lab = (REPO / "inventory/lab/group_vars/all/model_weights.yml").read_text(encoding="utf-8")
    assert re.findall(r"^# model_weights_draft_revision: (\w+)$", lab, re.MULTILINE) == [api["sha"]]
    # What the reference checks before it starts a DFlash drafter, and nothing else.
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    assert api["sha"] != make_checkpoint.generate(tmp_path / "sharded", 1, 3, 1024 * 1024)["sha"]
