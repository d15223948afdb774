"""The calibration table's key and the node-side check that reuses a measured table."""

from __future__ import annotations

import json

import pytest

from model_configs import GLM45
from vllm_dualpath import calibration, table_key


@pytest.fixture
def node(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GLM45))
    store = tmp_path / "calibration" / "tables"
    link = tmp_path / "calibration" / "0.1.0-abc.json"
    store.mkdir(parents=True)
    argv = [
        "--model",
        str(model),
        "--tensor-parallel-size",
        "2",
        "--store",
        str(store),
        "--link",
        str(link),
        "--gpu",
        "NVIDIA GB10",
        "--driver",
        "580.95.05",
    ]
    return model, store, link, argv


def check(argv, capsys) -> dict:
    assert table_key.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_nothing_measured_is_missing_then_a_measured_table_is_linked_then_reused(node, capsys):
    _model, store, link, argv = node
    first = check(argv, capsys)
    assert first["state"] == "missing" and not link.exists()
    assert first["key"]["shapes"] == sorted([[s, k] for s, k in first["key"]["shapes"]])
    key = table_key.TableKey(
        first["key"]["gpu"],
        first["key"]["driver"],
        first["key"]["kernels"],
        tuple(tuple(pair) for pair in first["key"]["shapes"]),
    )
    table = calibration.CalibrationTable(
        {pair: () for pair in key.shapes}, gpu=key.gpu, key=key, measured_up_to_m=8192
    )
    (store / f"{key.digest()}.json").write_text(calibration.dump(table))
    assert check(argv, capsys)["state"] == "linked"
    assert calibration.load(link) == table
    assert link.readlink().parts[0] == "tables"  # relative: it resolves inside the container too
    assert check(argv, capsys)["state"] == "reused"


def test_another_driver_or_model_needs_another_table(node, capsys):
    model, _store, _link, argv = node
    digest = check(argv, capsys)["digest"]
    other_driver = check([*argv[:-1], "590.1"], capsys)["digest"]
    (model / "config.json").write_text(json.dumps({**GLM45, "vocab_size": 200000}))
    other_model = check(argv, capsys)["digest"]
    assert len({digest, other_driver, other_model}) == 3


def test_a_config_the_key_cannot_read_is_an_error_naming_it(node, capsys):
    model, _, _, argv = node
    (model / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as stopped:
        table_key.main(argv)
    assert stopped.value.code == 2
    assert "hidden_size" in capsys.readouterr().err


def test_the_driver_version_is_read_from_procfs(tmp_path):
    version = tmp_path / "version"
    version.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build\n"
    )
    assert table_key.read_driver(version) == "580.95.05"


def test_mismatches_name_each_difference_and_skip_what_is_unknown_here():
    measured = table_key.TableKey("NVIDIA GB10", "580.95.05", "aaaa", ((1, 2),))
    here = table_key.TableKey("", "590.1", "aaaa", ((1, 2), (3, 4)))
    problems = table_key.key_mismatches(measured, here)
    assert problems == ["driver '580.95.05' (here '590.1')", "shapes without a measurement: 3x4"]
