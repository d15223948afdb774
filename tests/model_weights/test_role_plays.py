"""The model_weights role run by Ansible on a made-up pair: two inventory hosts on this machine,
each with a model root of its own, staged from generated stand-ins. Only what needs neither SSH
nor rsync between the nodes runs here (the read entry point, the preflight); the copy over the rail
is the molecule scenario's."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from lab import make_checkpoint
from tests.helpers import REPO, output_of, run_tool

MODEL_REPO = "stand-in/generated"
DRAFT_REPO = "stand-in/drafter"


@dataclass
class Pair:
    """Two hosts of one pair (spark-b, rank 1, is the source node) and their model roots."""

    directory: Path
    model: dict[str, Any]
    draft: dict[str, Any]

    def root(self, host: str) -> Path:
        return self.directory / "roots" / host

    def revision_dir(self, host: str, repo_id: str, revision: str) -> Path:
        return self.root(host) / repo_id.replace("/", "--") / revision

    def play(self, plays: list[dict[str, Any]], *extra: str) -> tuple[int, str]:
        (self.directory / "play.yml").write_text(yaml.safe_dump(plays), encoding="utf-8")
        result = run_tool(
            "env",
            f"ANSIBLE_ROLES_PATH={REPO / 'roles'}",
            "ANSIBLE_NOCOLOR=1",
            "ansible-playbook",
            "-i",
            "inventory.yml",
            *extra,
            "play.yml",
            cwd=self.directory,
            timeout=300,
        )
        return result.returncode, output_of(result, 400)


def stand_in(directory: Path, **options: Any) -> dict[str, Any]:
    return make_checkpoint.generate(directory, seed=3, shards=2, shard_bytes=16 * 1024, **options)


@pytest.fixture
def pair(tmp_path: Path) -> Pair:
    model = stand_in(tmp_path / "hub/model")
    draft = stand_in(tmp_path / "hub/draft", single_file=True, repo_id=DRAFT_REPO)
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    }
    inventory = {
        "all": {
            "children": {
                "lab_pair": {
                    "hosts": {
                        "spark-a": {"spark_pair_rank": 0, "model_weights_root": ""},
                        "spark-b": {"spark_pair_rank": 1, "model_weights_root": ""},
                    },
                    "vars": {
                        **local,
                        "spark_pair_name": "lab_pair",
                        "model_weights_repo_id": MODEL_REPO,
                        "model_weights_revision": model["sha"],
                        "model_weights_source": "stand_in_directory",
                        "model_weights_stand_in_directory": str(tmp_path / "hub/model"),
                        "model_weights_draft_repo_id": DRAFT_REPO,
                        "model_weights_draft_revision": draft["sha"],
                        "model_weights_draft_stand_in_directory": str(tmp_path / "hub/draft"),
                        "model_weights_free_headroom_gb": 0,
                        "model_weights_copy_address": "127.0.0.1",
                    },
                }
            }
        }
    }
    made = Pair(tmp_path, model, draft)
    for host, variables in inventory["all"]["children"]["lab_pair"]["hosts"].items():
        variables["model_weights_root"] = str(made.root(host))
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return made


def stage_by_hand(pair: Pair, manifest: ModuleType, host: str, repo_id: str, api: dict) -> Path:
    """Lay a stand-in out on `host` as the role leaves it: files, hub's file list, marker."""
    revision = api["sha"]
    directory = pair.revision_dir(host, repo_id, revision)
    hub = pair.directory / "hub" / ("draft" if repo_id == DRAFT_REPO else "model")
    shutil.copytree(hub / "files", directory)
    file_list = directory.with_name(f"{revision}.files.json")
    document = {"sha": revision, "siblings": sorted(api["siblings"], key=lambda s: s["rfilename"])}
    file_list.write_text(json.dumps(document, indent=4, sort_keys=True) + "\n", encoding="utf-8")
    marker = directory.with_name(f"{revision}.verified")
    assert manifest.seal(directory, file_list, marker)["verified"]
    return directory


def read_plays(**without_drafter: Any) -> list[dict[str, Any]]:
    report = (
        "PUBLISHED {{ inventory_hostname }} [{{ model_weights_path }}]"
        " [{{ model_weights_draft_path }}]"
    )
    return [
        {
            "name": "Read",
            "hosts": "lab_pair",
            "gather_facts": False,
            "vars": without_drafter,
            "tasks": [
                {"ansible.builtin.include_role": {"name": "spark_pair"}},
                {"ansible.builtin.include_role": {"name": "model_weights", "tasks_from": "read"}},
                {"ansible.builtin.debug": {"msg": report}},
            ],
        }
    ]


def published(output: str) -> dict[str, tuple[str, str]]:
    found = re.findall(r"PUBLISHED (spark-[ab]) \[([^\]]*)\] \[([^\]]*)\]", output)
    return {host: (model, draft) for host, model, draft in found}


def stage_both(pair: Pair, manifest: ModuleType) -> dict[str, tuple[str, str]]:
    expected = {}
    for host in ("spark-a", "spark-b"):
        model = stage_by_hand(pair, manifest, host, MODEL_REPO, pair.model)
        draft = stage_by_hand(pair, manifest, host, DRAFT_REPO, pair.draft)
        expected[host] = (str(model), str(draft))
    return expected


def test_read_publishes_the_drafter_on_both_nodes_and_an_empty_path_without_one(pair, manifest):
    expected = stage_both(pair, manifest)
    code, output = pair.play(read_plays())
    assert code == 0, output
    assert published(output) == expected, output

    code, output = pair.play(
        read_plays(model_weights_draft_repo_id="", model_weights_draft_revision="")
    )
    assert code == 0, output
    assert published(output) == {host: (paths[0], "") for host, paths in expected.items()}, output


def test_read_fails_naming_the_drafter_settings_and_the_fix_when_it_is_not_staged(pair, manifest):
    stage_both(pair, manifest)
    draft = pair.revision_dir("spark-a", DRAFT_REPO, pair.draft["sha"])
    draft.with_name(draft.name + ".verified").unlink()
    code, output = pair.play(read_plays())
    assert code != 0, output
    assert re.search(
        r"stand-in/drafter@\w{12} \(model_weights_draft_repo_id, model_weights_draft_revision\)"
        r"\s+is not\s+staged and verified on spark-a .*run\s+playbooks/weights\.yml",
        output,
        re.DOTALL,
    ), output
    # The node that has the drafter still reads both; the one that lacks it publishes nothing.
    assert set(published(output)) == {"spark-b"}, output


def test_a_drafter_without_model_safetensors_is_refused_before_anything_changes(pair):
    hub = pair.directory / "hub/draft"
    (hub / "files/model.safetensors").unlink()
    api = json.loads((hub / "api.json").read_text(encoding="utf-8"))
    api["siblings"] = [s for s in api["siblings"] if s["rfilename"] != "model.safetensors"]
    (hub / "api.json").write_text(json.dumps(api), encoding="utf-8")
    stage = [
        {
            "name": "Stage",
            "hosts": "lab_pair",
            "gather_facts": False,
            "any_errors_fatal": True,
            "roles": [{"role": "spark_pair"}, {"role": "model_weights"}],
        }
    ]
    code, output = pair.play(stage)
    assert code != 0, output
    assert re.search(
        r"stand-in/drafter@\w{12} has no model\.safetensors .*model_weights_draft_revision",
        output,
        re.DOTALL,
    ), output
    # Neither the drafter nor the checkpoint before it was touched, on either node.
    for host in ("spark-a", "spark-b"):
        assert not pair.root(host).exists(), (host, list(pair.root(host).rglob("*")))
