"""The model_weights role's settings, expressions and NFS export, evaluated with Ansible's Templar.

The kernel NFS server cannot run in the lab's containers, so the export is checked here as text.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible_trust import evaluate
from tests.helpers import REPO

ROLE = REPO / "roles/model_weights"
PROBE_OUTPUT = "4: enp1s0f1np1    inet 192.168.100.11/24 brd 192.168.100.255 scope global"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def task_named(file: str, start: str) -> dict[str, Any]:
    (task,) = [t for t in load(ROLE / "tasks" / file) if t["name"].startswith(start)]
    return task


def test_every_default_has_an_argument_spec_and_the_same_value():
    defaults = load(ROLE / "defaults/main.yml")
    options = load(ROLE / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        if isinstance(value, str) and "{{" in value:
            continue  # looked up at run time (the token from the environment)
        assert options[name].get("default", value) == value, name


@pytest.mark.parametrize(
    ("inventory", "expected"),
    [
        ({"model_weights_copy_address": "10.0.0.5"}, "10.0.0.5"),
        ({"rail_network_master_address": "192.168.100.21"}, "192.168.100.21"),
        ({}, "192.168.100.11"),
        ({"model_weights_rail_probe": {"stdout": ""}}, ""),
    ],
    ids=["setting", "rail_network fact", "interface address", "none"],
)
def test_rail_address_prefers_the_setting_then_rail_network_then_the_interface(inventory, expected):
    task = task_named("layout.yml", "Choose this node's rail address")
    variables = {
        "model_weights_copy_address": "",
        "model_weights_rail_probe": {"stdout": PROBE_OUTPUT},
        **inventory,
    }
    expression = task["ansible.builtin.set_fact"]["model_weights_rail_address"]
    assert str(evaluate(expression, variables)).strip() == expected


@pytest.mark.parametrize(("rank", "source"), [(1, "spark-b"), (0, "spark-a")])
def test_source_node_follows_the_source_rank(rank, source):
    task = task_named("layout.yml", "Name the node that fetches")
    variables = {
        **task["vars"],
        "model_weights_source_rank": rank,
        "spark_pair_rank0_host": "spark-a",
        "spark_pair_rank1_host": "spark-b",
        "spark_pair_peer": "spark-b",
        "inventory_hostname": "spark-a",
    }
    facts = task["ansible.builtin.set_fact"]
    assert str(evaluate(facts["model_weights_source_host"], variables)).strip() == source
    target = "spark-a" if source == "spark-b" else "spark-b"
    assert str(evaluate(facts["model_weights_target_host"], variables)).strip() == target


def test_nfs_export_is_read_only_to_the_peers_rail_address_only():
    text = (ROLE / "templates/model_weights.exports.j2").read_text(encoding="utf-8")
    variables = {
        "ansible_managed": "Ansible managed",
        "inventory_hostname": "spark-02",
        "model_weights_root": "/var/lib/dualspark/models",
        "model_weights_target_host": "spark-01",
        "hostvars": {"spark-01": {"model_weights_rail_address": "192.168.100.10"}},
    }
    rendered = evaluate(text, variables)
    exports = [line for line in rendered.splitlines() if line and not line.startswith("#")]
    assert exports == [
        "/var/lib/dualspark/models 192.168.100.10(ro,sync,no_subtree_check,root_squash,secure)"
    ]


def test_nfs_mount_is_always_read_only():
    task = task_named("nfs.yml", "Mount the source node's model root")
    expression = task["ansible.posix.mount"]["opts"]
    options = evaluate(expression, {"model_weights_nfs_mount_options": "rw,hard,nconnect=8"})
    assert options.split(",") == ["ro", "hard", "nconnect=8"]


# The drafter the reference deploys (MXFP8), pinned as it pins it.
DRAFTER = {
    "model_weights_draft_repo_id": "local-inference-lab/GLM-5.3-Flash-DFlash2-MXFP8",
    "model_weights_draft_revision": "62f758c0a0e19b9cb76fc098c911b8ed76daff5b",
}
MODEL_REVISION = "a" * 40


def settings(**overrides: Any) -> dict[str, Any]:
    """The role's defaults with a pinned model and the given overrides, as a play sees them."""
    return {
        **load(ROLE / "defaults/main.yml"),
        "model_weights_revision": MODEL_REVISION,
        "inventory_hostname": "spark-b",
        **overrides,
    }


def holds(expression: str, variables: dict[str, Any]) -> bool:
    """A task's `that` or `when` condition (a bare expression), as Ansible evaluates it."""
    return bool(evaluate("{{ " + expression + " }}", variables))


def checkpoints(**overrides: Any) -> list[dict[str, Any]]:
    task = task_named("layout.yml", "Name the checkpoints to stage")
    return evaluate(
        task["ansible.builtin.set_fact"]["model_weights_checkpoints"], settings(**overrides)
    )


def drafter_check(**overrides: Any) -> bool | None:
    """validate.yml's drafter check: None when skipped (no drafter), else whether it passes."""
    task = task_named("validate.yml", "Check that the drafter, when one is set")
    variables = settings(**overrides)
    if not holds(task["when"], variables):
        return None
    return all(holds(c, variables) for c in task["ansible.builtin.assert"]["that"])


def test_no_drafter_by_default_and_the_check_is_skipped():
    assert drafter_check() is None
    assert [c["name"] for c in checkpoints()] == ["model"]


def test_the_reference_drafter_pinned_to_its_commit_passes():
    assert drafter_check(**DRAFTER) is True


@pytest.mark.parametrize(
    "change",
    [
        {"model_weights_draft_revision": "main"},
        {"model_weights_draft_revision": ""},
        {"model_weights_draft_revision": DRAFTER["model_weights_draft_revision"].upper()},
        {"model_weights_draft_revision": DRAFTER["model_weights_draft_revision"][:39]},
        {"model_weights_draft_repo_id": ""},
        {"model_weights_draft_repo_id": "GLM-5.3-Flash-DFlash2-MXFP8"},
        {"model_weights_draft_repo_id": "brandonmusic/GLM-5.3-Flash-tr3-4bpw"},
    ],
    ids=[
        "branch",
        "repo-without-revision",
        "upper-case",
        "short",
        "revision-without-repo",
        "no-owner",
        "the-model-itself",
    ],
)
def test_a_drafter_not_pinned_to_a_commit_of_its_own_repository_is_refused(change):
    assert drafter_check(**{**DRAFTER, **change}) is False


def test_the_drafter_refusal_names_the_host_the_variables_and_the_fix():
    task = task_named("validate.yml", "Check that the drafter, when one is set")
    message = evaluate(
        task["ansible.builtin.assert"]["fail_msg"],
        settings(**{**DRAFTER, "model_weights_draft_revision": "main"}),
    )
    for needed in (
        "spark-b",
        "model_weights_draft_repo_id",
        "model_weights_draft_revision",
        "40-digit commit",
        "leave both empty",
        "at 'main'",
    ):
        assert needed in message, (needed, message)


@pytest.mark.parametrize(
    ("overrides", "passes"),
    [
        ({"model_weights_source": "stand_in_directory", **DRAFTER}, False),
        (
            {
                "model_weights_source": "stand_in_directory",
                "model_weights_draft_stand_in_directory": "/srv/stand-in-hub/drafter-1",
                **DRAFTER,
            },
            True,
        ),
        ({"model_weights_source": "stand_in_directory"}, True),
        ({"model_weights_source": "hub", **DRAFTER}, True),
    ],
    ids=["drafter-without-directory", "drafter-with-directory", "no-drafter", "hub"],
)
def test_a_stand_in_drafter_needs_its_directory(overrides, passes):
    task = task_named("validate.yml", "Check that the stand-in source names the drafter's")
    assert holds(task["ansible.builtin.assert"]["that"], settings(**overrides)) is passes


def test_the_drafter_is_staged_after_the_model_with_settings_of_its_own():
    model, draft = checkpoints(
        **DRAFTER, model_weights_draft_stand_in_directory="/srv/stand-in-hub/drafter-1"
    )
    assert model == {
        "name": "model",
        "prefix": "model_weights",
        "repo_id": "brandonmusic/GLM-5.3-Flash-tr3-4bpw",
        "revision": MODEL_REVISION,
        "stand_in_directory": "",
        "required_files": [],
    }
    assert draft == {
        "name": "draft",
        "prefix": "model_weights_draft",
        "repo_id": DRAFTER["model_weights_draft_repo_id"],
        "revision": DRAFTER["model_weights_draft_revision"],
        "stand_in_directory": "/srv/stand-in-hub/drafter-1",
        "required_files": ["config.json", "model.safetensors"],
    }


@pytest.mark.parametrize(
    ("peer", "same"),
    [({}, True), ({"model_weights_draft_revision": "b" * 40}, False), ({"drafter": False}, False)],
    ids=["same", "other-drafter-revision", "peer-without-drafter"],
)
def test_both_nodes_must_stage_the_same_checkpoints(peer, same):
    task = task_named("layout.yml", "Check that both nodes of the pair name the same checkpoints")
    here = checkpoints(**DRAFTER)
    peer_drafter = DRAFTER if peer.pop("drafter", True) else {}
    there = checkpoints(**{**peer_drafter, **peer})
    variables = {
        **task["vars"],
        "model_weights_checkpoints": here,
        "spark_pair_peer": "spark-a",
        "hostvars": {"spark-a": {"model_weights_checkpoints": there}},
    }
    assert holds(task["ansible.builtin.assert"]["that"], variables) is same
    # A peer that failed before it named its checkpoints is out of the play: nothing to compare.
    assert holds(task["ansible.builtin.assert"]["that"], {**variables, "hostvars": {"spark-a": {}}})


def checkpoint_facts(name: str, **overrides: Any) -> dict[str, Any]:
    """checkpoint.yml's facts for checkpoint `name` with a drafter set."""
    task = task_named("checkpoint.yml", "Name the checkpoint's settings and paths")
    variables = {
        **settings(**DRAFTER, **overrides),
        **task["vars"],
        "model_weights_checkpoints": checkpoints(**DRAFTER, **overrides),
        "model_weights_checkpoint_name": name,
    }
    variables.setdefault("model_weights_is_source", True)
    return {
        fact: evaluate(expression, variables)
        for fact, expression in task["ansible.builtin.set_fact"].items()
    }


def test_the_drafter_is_laid_out_like_the_checkpoint_in_its_own_repository_directory():
    facts = checkpoint_facts("draft")
    base = "/var/lib/dualspark/models/local-inference-lab--GLM-5.3-Flash-DFlash2-MXFP8/"
    revision = DRAFTER["model_weights_draft_revision"]
    assert facts["model_weights_checkpoint"]["name"] == "draft"
    assert facts["model_weights_revision_dir"] == base + revision
    assert facts["model_weights_file_list"] == base + revision + ".files.json"
    assert facts["model_weights_marker"] == base + revision + ".verified"
    assert facts["model_weights_served_dir"] == base + revision
    assert facts["model_weights_served_marker"] == base + revision + ".verified"
    model = checkpoint_facts("model")
    assert model["model_weights_revision_dir"] == (
        "/var/lib/dualspark/models/brandonmusic--GLM-5.3-Flash-tr3-4bpw/" + MODEL_REVISION
    )


def test_a_peer_sharing_over_nfs_serves_the_drafter_through_the_mount():
    facts = checkpoint_facts("draft", model_weights_share="nfs", model_weights_is_source=False)
    revision = DRAFTER["model_weights_draft_revision"]
    mounted = "/mnt/dualspark-models/local-inference-lab--GLM-5.3-Flash-DFlash2-MXFP8/" + revision
    assert facts["model_weights_served_dir"] == mounted
    assert facts["model_weights_served_marker"] == mounted + ".verified"
    assert facts["model_weights_revision_dir"].startswith("/var/lib/dualspark/models/")
    # The source node that exports it serves its own copy.
    source = checkpoint_facts("draft", model_weights_share="nfs", model_weights_is_source=True)
    assert source["model_weights_served_dir"] == source["model_weights_revision_dir"]


def test_the_manifest_is_told_what_the_drafter_cannot_do_without():
    assert checkpoint_facts("model")["model_weights_require_args"] == ""
    assert checkpoint_facts("draft")["model_weights_require_args"] == (
        "--require config.json --require model.safetensors"
    )
    odd = checkpoint_facts("draft", model_weights_draft_required_files=["my config.json"])
    assert shlex.split(odd["model_weights_require_args"]) == ["--require", "my config.json"]


def test_the_require_arguments_reach_the_manifest_as_it_expects(manifest, drafter, capsys):
    arguments = shlex.split(checkpoint_facts("draft")["model_weights_require_args"])
    assert manifest.main(drafter.args("seal", *arguments)) == 0
    assert json.loads(capsys.readouterr().out)["verified"]


def not_provided(required: list[str], listed: list[str]) -> list[str]:
    task = task_named("preflight.yml", "Check that the revision has every file the service needs")
    variables = {
        **task["vars"],
        "model_weights_checkpoint": {"required_files": required},
        "model_weights_hub_answer": {"siblings": [{"rfilename": name} for name in listed]},
    }
    return evaluate(task["vars"]["_model_weights_not_provided"], variables)


def test_preflight_finds_the_files_a_drafter_revision_lacks():
    needs = ["config.json", "model.safetensors"]
    assert not_provided(needs, ["config.json", "model.safetensors", "README.md"]) == []
    assert not_provided(needs, ["config.json", "model.safetensors.index.json"]) == [
        "model.safetensors"
    ]
    assert not_provided([], ["model-00001-of-00002.safetensors"]) == []


def inspected(pending: bool, total: int, present: int) -> dict[str, Any]:
    """inspect.yml's record of one checkpoint, from the source's file list and this node's probe."""
    task = task_named("inspect.yml", "Record what this node holds")
    variables = {
        **task["vars"],
        "model_weights_inspected": {},
        "model_weights_checkpoint": {"name": "draft", "repo_id": "o/d", "revision": "c" * 40},
        "model_weights_state": {"verified": False, "bytes_present": present},
        "model_weights_pending": pending,
        "model_weights_hub_answer": {},
        "model_weights_source_host": "spark-b",
        "hostvars": {"spark-b": {"model_weights_hub_answer": {"siblings": [{"size": total}]}}},
    }
    return evaluate(task["ansible.builtin.set_fact"]["model_weights_inspected"], variables)["draft"]


def test_inspect_records_what_is_left_to_stage_of_a_checkpoint():
    record = inspected(pending=True, total=1000, present=300)
    assert (record["pin"], record["pending"]) == ("o/d@cccccccccccc", True)
    assert (record["bytes_total"], record["bytes_missing"]) == (1000, 700)
    # Verified here, or not needed here (a peer that mounts the source's over NFS holds nothing).
    for present in (1000, 0):
        idle = inspected(pending=False, total=1000, present=present)
        assert (idle["bytes_total"], idle["bytes_missing"]) == (0, 0)


def disk_check(free: int, headroom_gb: int, draft_pending: bool) -> tuple[bool, str]:
    task = task_named("disk.yml", "Check free disk against the checkpoints' sizes")
    variables = {
        **task["vars"],
        "inventory_hostname": "spark-a",
        "model_weights_root": "/var/lib/dualspark/models",
        "model_weights_free_headroom_gb": headroom_gb,
        "model_weights_free_probe": {"stdout": str(free)},
        "model_weights_inspected": {
            "model": {
                "pin": "org/model@aaaaaaaaaaaa",
                "pending": True,
                "bytes_total": 3 * 2**30,
                "bytes_missing": 2 * 2**30,
            },
            "draft": {
                "pin": "org/drafter@cccccccccccc",
                "pending": draft_pending,
                "bytes_total": 2**30 if draft_pending else 0,
                "bytes_missing": 2**30 if draft_pending else 0,
            },
        },
    }
    assertion = task["ansible.builtin.assert"]
    return holds(assertion["that"], variables), evaluate(assertion["fail_msg"], variables)


def test_free_disk_is_checked_against_both_checkpoints_together():
    # 2 GiB of the model and 1 GiB of the drafter still to stage, 1 GiB headroom: 4 GiB needed.
    fits, _ = disk_check(free=4 * 2**30, headroom_gb=1, draft_pending=True)
    short, message = disk_check(free=4 * 2**30 - 1, headroom_gb=1, draft_pending=True)
    assert fits and not short
    for needed in (
        "spark-a",
        "staging org/model@aaaaaaaaaaaa and org/drafter@cccccccccccc needs 3.00 GB more",
        "model_weights_free_headroom_gb",
        "Nothing was changed on either node",
    ):
        assert needed in message, (needed, message)
    # A drafter already staged takes nothing more.
    assert disk_check(free=3 * 2**30, headroom_gb=1, draft_pending=False)[0]


@pytest.mark.parametrize(
    ("verified", "model_path", "draft_path"),
    [
        ({"model": "/m/rev", "draft": "/d/rev"}, "/m/rev", "/d/rev"),
        ({"model": "/m/rev"}, "/m/rev", ""),
        ({}, None, ""),
    ],
    ids=["both", "no-drafter", "check-mode-before-staging"],
)
def test_publish_gives_the_drafter_path_or_an_empty_one(verified, model_path, draft_path):
    tasks = load(ROLE / "tasks/publish.yml")
    model, draft = tasks[0], tasks[1]
    variables = {"model_weights_verified_dirs": verified}
    published = holds(model["when"], variables)
    assert published is (model_path is not None)
    if published:
        assert evaluate(model["ansible.builtin.set_fact"]["model_weights_path"], variables) == (
            model_path
        )
    assert evaluate(draft["ansible.builtin.set_fact"]["model_weights_draft_path"], variables) == (
        draft_path
    )


def pruned(**overrides: Any) -> tuple[list[str], list[str]]:
    """What prune.yml removes (markers, then the rest) of two revisions of each repository."""
    tasks = load(ROLE / "tasks/prune.yml")
    plan_task = task_named("prune.yml", "Name each repository and the revisions kept")
    variables = settings(**DRAFTER, **overrides)
    plan = evaluate(plan_task["ansible.builtin.set_fact"]["model_weights_prune_plan"], variables)
    results = []
    for entry in plan:
        directory = "/m/" + entry["repo_id"].replace("/", "--")
        revisions = [entry["revision"], "f" * 40]
        files = [
            {"path": f"{directory}/{revision}{suffix}"}
            for revision in revisions
            for suffix in ("", ".files.json", ".verified")
        ]
        results.append({"item": entry, "files": files})
    variables = {**variables, "model_weights_staged": {"results": results}}
    removed = []
    for start in ("Remove the markers of the other revisions", "Remove the other revisions"):
        task = next(t for t in tasks if t["name"] == start)
        pairs = evaluate(task["loop"], variables)
        removed.append(
            [
                pair[1]["path"]
                for pair in pairs
                if all(holds(c, {**variables, "item": pair}) for c in task["when"])
            ]
        )
    return removed[0], removed[1]


def test_prune_removes_other_revisions_of_both_repositories_markers_first():
    markers, rest = pruned()
    old = "f" * 40
    model = "/m/brandonmusic--GLM-5.3-Flash-tr3-4bpw/"
    draft = "/m/local-inference-lab--GLM-5.3-Flash-DFlash2-MXFP8/"
    assert markers == [f"{model}{old}.verified", f"{draft}{old}.verified"]
    assert rest == [
        f"{model}{old}",
        f"{model}{old}.files.json",
        f"{draft}{old}",
        f"{draft}{old}.files.json",
    ]


def test_prune_keeps_an_older_drafter_when_asked():
    markers, rest = pruned(
        model_weights_draft_keep_revisions=["f" * 40, DRAFTER["model_weights_draft_revision"]]
    )
    assert all("DFlash2" not in path for path in markers + rest)


def test_prune_refuses_to_drop_the_drafter_being_served():
    task = task_named("prune.yml", "Check that each revision being served")
    plan_task = task_named("prune.yml", "Name each repository and the revisions kept")
    variables = settings(**DRAFTER, model_weights_draft_keep_revisions=["f" * 40])
    plan = evaluate(plan_task["ansible.builtin.set_fact"]["model_weights_prune_plan"], variables)
    assertion = task["ansible.builtin.assert"]
    outcomes = [
        all(holds(c, {**variables, "item": item}) for c in assertion["that"]) for item in plan
    ]
    assert outcomes == [True, False]
    message = evaluate(assertion["fail_msg"], {**variables, "item": plan[1]})
    assert "model_weights_draft_keep_revisions" in message and "spark-b" in message


def test_every_entry_points_option_has_the_defaults_value():
    defaults = load(ROLE / "defaults/main.yml")
    for entry, spec in load(ROLE / "meta/argument_specs.yml")["argument_specs"].items():
        for name, option in spec["options"].items():
            assert name in defaults, (entry, name)
            value = defaults[name]
            if "default" in option and not (isinstance(value, str) and "{{" in value):
                assert option["default"] == value, (entry, name)
