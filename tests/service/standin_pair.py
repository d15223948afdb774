"""Helpers that run the stand-in's two ranks as local processes (no containers)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.standin_context import STANDIN


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fake_plugin(root: Path, *, name: str = "dualpath", body: str = "CALLS = []") -> Path:
    """A distribution on disk with one vllm.general_plugins entry point, as a wheel unpacks."""
    package = root / "fakeplugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        body + "\n\ndef register():\n    print('fake plugin registered', flush=True)\n",
        encoding="utf-8",
    )
    info = root / "fakeplugin-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakeplugin\nVersion: 1.2.3\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\n{name} = fakeplugin:register\n", encoding="utf-8"
    )
    return root


class Rank:
    def __init__(self, rank: int, args: list[str], env: dict[str, str], log: Path) -> None:
        self.rank = rank
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_standin", "serve", *args],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8")


class Pair:
    """Rank 1 and rank 0 on 127.0.0.1 with free ports, stopped at the end."""

    def __init__(self, workdir: Path, plugin_path: Path | None, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.api_port = free_port()
        self.master_port = free_port()
        self.key = "test-key-" + workdir.name
        path = [str(STANDIN)] + ([str(plugin_path)] if plugin_path else [])
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join(path),
            "VLLM_API_KEY": self.key,
            "STANDIN_HEARTBEAT_TIMEOUT_S": "3",
            "STANDIN_RENDEZVOUS_TIMEOUT_S": "20",
            **env,
        }
        self.ranks: dict[int, Rank] = {}

    def common(self, rank: int) -> list[str]:
        return [
            "/models/test",
            "--served-model-name",
            "test-model",
            "--tensor-parallel-size",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(self.master_port),
        ]

    def start(
        self, rank: int, env: dict[str, str] | None = None, serve_args: Sequence[str] = ()
    ) -> Rank:
        """Start a rank; SERVE_ARGS go after the pair's own (e.g. --shutdown-timeout 10)."""
        args = self.common(rank)
        args += ["--headless"] if rank else ["--host", "127.0.0.1", "--port", str(self.api_port)]
        args += serve_args
        log = self.workdir / f"rank{rank}.log"
        self.ranks[rank] = Rank(rank, args, {**self.env, **(env or {})}, log)
        return self.ranks[rank]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.api_port}{path}"

    def call(
        self, path: str, body: dict[str, Any] | None = None, key: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url(path), data=data)
        request.add_header("Authorization", f"Bearer {key or self.key}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else {}

    def wait_ready(self, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for rank in self.ranks.values():
                if rank.proc.poll() is not None:
                    raise AssertionError(f"rank {rank.rank} exited:\n{rank.output()}")
            try:
                if self.call("/v1/models")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("rank 0 never answered /v1/models")

    def stop(self) -> None:
        for rank in self.ranks.values():
            if rank.proc.poll() is None:
                rank.proc.kill()
                rank.proc.wait()
