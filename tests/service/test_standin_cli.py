"""The stand-in parses `vllm serve` exactly as the real vLLM parser of the pinned version does.

The real parser runs in its own venv (lab/vllm_cli_venv.py: made on first use, ~2 min; a failure
to make it fails these tests, it never skips them), once for the whole module: it dumps its
option table (which must equal the one the lab made under .cache/lab) and parses every command line
below. The stand-in must accept what vLLM accepts, reject what it rejects with the same exit
status (2: argparse, 1: an exception before loading), and parse accepted lines to the same
values for every option both can represent.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_standin import cli, environ, fork_flags, spec_parser

from lab import vllm_cli_spec, vllm_cli_venv
from tests.service.render import production_rank

REFERENCE = [  # Entrpi/glm-5.3-flash-exl3-2x-spark's launch of the fork, both ranks' common part
    *("/models/glm53-exl3", "--served-model-name", "glm-5.3-flash", "--trust-remote-code"),
    *("--quantization", "exl3", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.85"),
    *("--max-model-len", "524288", "--max-num-seqs", "4", "--block-size", "2304"),
    *("--mm-processor-cache-gb", "0.5", "--load-format", "instanttensor"),
    *("--max-num-batched-tokens", "8192", "--kv-cache-dtype", "fp8_e4m3"),
    *("--speculative-config", '{"method":"mtp","num_speculative_tokens":4}'),
    *("--kv-cache-memory", "12400000000", "--skip-mm-profiling", "--enable-auto-tool-choice"),
    *("--tool-call-parser", "glm47", "--reasoning-parser", "glm45"),
    *("--default-chat-template-kwargs", '{"enable_thinking": false}'),
    *("--distributed-executor-backend", "mp", "--nnodes", "2"),
    *("--master-addr", "10.200.0.15", "--master-port", "29521"),
    *("--shutdown-timeout", "120", "--linear-backend", "marlin"),
]
CASES: dict[str, list[str]] = {
    "reference rank 0": [*REFERENCE, "--node-rank", "0", "--host", "0.0.0.0", "--port", "8000"],
    "reference rank 1": [*REFERENCE, "--node-rank", "1", "--headless"],
    "vLLM's other spellings": [
        *("/m", "--max_model_len", "1k", "--compilation-config.mode", "3", "-tp", "2"),
        *("--served-model-name", "a", "b", "--api-key", "k1", "k2", "--kv-cache-memory-bytes"),
        *("1G", "--no-enable-prefix-caching", "--disable-log-requests", "-O2"),
    ],
    "--model instead of the positional": ["--model", "/m", "--port", "9000"],
    "human-readable and auto": ["/m", "--max-num-batched-tokens", "8k", "--max-model-len", "auto"],
    "a JSON option by keys": ["/m", "--speculative-config.method", "mtp", "--kv-offloading-size=2"],
    "an unknown flag": ["/m", "--no-such-flag"],
    "a misspelt flag": ["/m", "--max-model-length", "10"],
    "an ambiguous abbreviation": ["/m", "--kv", "1"],
    "a bad choice": ["/m", "--linear-backend", "bogus"],
    "another bad choice": ["/m", "--kda-prefill-backend", "nope"],
    "a bad integer": ["/m", "--max-num-seqs", "four"],
    "a binary suffix with decimals": ["/m", "--max-num-batched-tokens", "1.5K"],
    "a missing value": ["/m", "--port"],
    "a missing list value": ["/m", "--served-model-name"],
    "a value for a flag": ["/m", "--headless=yes"],
    "a config that is not JSON": ["/m", "--compilation-config", "{nope"],
    "a config key vLLM does not know": ["/m", "--compilation-config", '{"nonsense": 1}'],
    "auto tool choice without a parser": ["/m", "--enable-auto-tool-choice"],
    "--served-model-name before the model": ["--served-model-name", "x"],
    "a dotted key without a value": ["/m", "--compilation-config.mode"],
}
# Where the stand-in's wording is argparse's own, the error line must match vLLM's too.
SAME_ERROR_LINE = {
    "an unknown flag",
    "a misspelt flag",
    "an ambiguous abbreviation",
    "a bad choice",
    "another bad choice",
    "a bad integer",
    "a missing value",
    "a missing list value",
    "a value for a flag",
}


def unit_cases() -> dict[str, list[str]]:
    """The production units' own `vllm serve` lines, as the role renders them."""
    cases = {}
    for rank in (0, 1):
        argv = production_rank(rank)["vllm_tp2_service_run_args"]
        cases[f"production unit rank {rank}"] = argv[argv.index("serve") + 1 :]
    return cases


def fork_cases() -> dict[str, list[str]]:
    """Each fork-only flag alone: the stock parser must reject it (else it is not fork-only)."""
    cases = {}
    for flag in fork_flags.FORK_ONLY_FLAGS:
        option = flag["option_strings"][0]
        value = [] if flag["action"] in ("store_true", "enable_disable") else ["1"]
        cases[f"fork-only {option}"] = ["/m", option, *value]
    return cases


@pytest.fixture(scope="module")
def real() -> Iterator[dict[str, Any]]:
    """vLLM's spec and its results for every case, from one run in the parser venv."""
    cases = {**CASES, **unit_cases(), **fork_cases()}
    try:
        out = vllm_cli_spec.run_in_venv("report", json.dumps(list(cases.values())))
    except (vllm_cli_venv.VenvError, RuntimeError) as exc:
        pytest.fail(f"the real vLLM parser could not run: {exc}")
    report = json.loads(out)
    yield {"spec": report["spec"], "parsed": dict(zip(cases, report["parsed"], strict=True))}


def standin(argv: list[str]) -> dict[str, Any]:
    """cli.parse as cli.main runs it, with the same outcome record as the real side."""
    stderr = io.StringIO()
    code, values = 0, {}
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stderr):
        try:
            args = cli.parse(["serve", *argv])
            values = {k: vllm_cli_spec.encode(v) for k, v in vars(args).items()}
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except (ValueError, TypeError, IndexError) as exc:
            code = 1
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    return {"exit": code, "stderr": stderr.getvalue(), "values": values}


def representable(value: Any) -> bool:
    return vllm_cli_spec.PYTHON_VALUE not in json.dumps(value)


def test_the_spec_the_lab_uses_is_the_pinned_vllms(real: dict[str, Any]) -> None:
    fresh = vllm_cli_spec.format_spec(real["spec"])
    used = spec_parser.SPEC_PATH.read_text(encoding="utf-8")
    assert used == fresh, "stale: run `.venv/bin/python lab/vllm_cli_spec.py write`"
    assert real["spec"]["vllm_version"] == vllm_cli_venv.VLLM_VERSION


@pytest.mark.parametrize("case", [*CASES, "production unit rank 0", "production unit rank 1"])
def test_standin_parses_as_vllm(real: dict[str, Any], case: str) -> None:
    theirs = real["parsed"][case]
    mine = standin(theirs["argv"])
    assert mine["exit"] == theirs["exit"], f"vLLM: {theirs['stderr']}\nstand-in: {mine['stderr']}"
    if case in SAME_ERROR_LINE:
        assert mine["stderr"].strip().splitlines()[-1] == theirs["stderr"].strip().splitlines()[-1]
    compared = 0
    for dest, value in theirs["values"].items():
        if representable(value):
            assert mine["values"].get(dest) == value, dest
            compared += 1
    assert compared or theirs["exit"], "nothing compared"


def test_what_vllm_accepts_and_rejects_here(real: dict[str, Any]) -> None:
    """The cases mean what their names say (else the parity above proves little)."""
    accepted = {case for case, result in real["parsed"].items() if result["exit"] == 0}
    assert accepted == {
        "reference rank 0",
        "reference rank 1",
        "vLLM's other spellings",
        "--model instead of the positional",
        "human-readable and auto",
        "a JSON option by keys",
        "production unit rank 0",
        "production unit rank 1",
    }
    assert "unrecognized arguments: --no-such-flag" in real["parsed"]["an unknown flag"]["stderr"]
    kv = real["parsed"]["reference rank 0"]["values"]["kv_cache_memory_bytes"]
    assert kv == 12_400_000_000, "--kv-cache-memory is the stock flag's abbreviation"


def test_fork_only_flags_are_what_stock_vllm_lacks(real: dict[str, Any]) -> None:
    stock = {s for action in real["spec"]["actions"] for s in action["option_strings"]}
    for flag in fork_flags.FORK_ONLY_FLAGS:
        assert not stock & set(flag["option_strings"]), f"{flag['option_strings']} is stock"
        result = real["parsed"][f"fork-only {flag['option_strings'][0]}"]
        assert "unrecognized arguments" in result["stderr"], flag
        assert flag.get("why"), "say where the fork's launch passes it"


def test_every_converter_of_the_spec_is_known() -> None:
    """A kind the stand-in cannot name would accept any string: regenerate with a new kind."""

    def kinds(kind: dict[str, Any] | None) -> Iterator[str]:
        while kind:
            yield kind["kind"]
            kind = kind.get("inner")

    spec = spec_parser.load_spec()
    unknown = [a["dest"] for a in spec["actions"] if "other" in kinds(a["type"])]
    assert not unknown


def test_unknown_vllm_variables_warn_as_vllm_does(caplog: pytest.LogCaptureFixture) -> None:
    spec = spec_parser.load_spec()
    env = {"VLLM_HOST_IP": "10.0.0.1", "VLLM_NO_SUCH_THING": "1", "NCCL_DEBUG": "INFO"}
    with caplog.at_level(logging.WARNING, logger="vllm.platforms.interface"):
        environ.validate_environ(env, spec, hard_fail=False)
    assert caplog.messages == ["Unknown vLLM environment variable detected: VLLM_NO_SUCH_THING"]
    with pytest.raises(ValueError, match="Unknown vLLM environment variable detected"):
        environ.validate_environ(env, spec, hard_fail=True)  # --fail-on-environ-validation
    removed = next(iter(spec["removed_environment_variables"]))
    with pytest.raises(ValueError, match="has been removed"):
        environ.validate_environ({removed: "1"}, spec, hard_fail=False)


def test_a_new_spec_is_a_new_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """lab/standin_image.py tags the image by a recipe digest that covers the spec."""
    from lab import labctl, standin_image

    context = tmp_path / "standin"
    ignore = shutil.ignore_patterns("__pycache__", ".mypy_cache")
    shutil.copytree(standin_image.CONTEXT, context, ignore=ignore)
    spec = tmp_path / "vllm-serve-cli.json"
    shutil.copyfile(standin_image.SPEC, spec)
    monkeypatch.setattr(labctl, "current_image_digest", lambda: "base")
    monkeypatch.setattr(standin_image, "CONTEXT", context)
    monkeypatch.setattr(standin_image, "SPEC", spec)
    before = standin_image.recipe_digest()
    assert standin_image.recipe_digest() == before
    spec.write_text(spec.read_text(encoding="utf-8").replace("0.34", "0.35", 1), encoding="utf-8")
    assert standin_image.recipe_digest() != before
