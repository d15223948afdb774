"""The hub download script hands the pinned revision and target directory to huggingface_hub."""

from __future__ import annotations

import sys
import types


def test_snapshot_download_gets_the_pinned_revision_and_directory(fetch_hub, monkeypatch, capsys):
    calls: list[dict] = []

    def snapshot_download_stand_in(**kwargs):
        calls.append(kwargs)
        return kwargs["local_dir"]

    # Stand-in for the hub client, which is installed only in the node's hub venv.
    stand_in = types.ModuleType("huggingface_hub")
    stand_in.snapshot_download = snapshot_download_stand_in  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "huggingface_hub", stand_in)

    revision = "31c85610f6b7edd423b2649bfa45d34c026cfeb7"
    code = fetch_hub.main(
        ["--repo-id", "org/model", "--revision", revision, "--dir", "/m/rev", "--max-workers", "3"]
    )
    assert code == 0
    assert calls == [
        {"repo_id": "org/model", "revision": revision, "local_dir": "/m/rev", "max_workers": 3}
    ]
    assert "org/model@" + revision in capsys.readouterr().err
