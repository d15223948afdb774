"""The generated stand-in repository is deterministic, so the lab can pin its revision."""

from __future__ import annotations

import yaml

from tests.conftest import REPO
from tests.model_weights import make_checkpoint


def test_seed_1_gives_the_revision_the_lab_pins(tmp_path):
    assert make_checkpoint.main(["--out", str(tmp_path), "--seed", "1"]) == 0
    api = yaml.safe_load((tmp_path / "api.json").read_text(encoding="utf-8"))
    lab = yaml.safe_load(
        (REPO / "inventory/lab/group_vars/lab_pair/model_weights.yml").read_text(encoding="utf-8")
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
