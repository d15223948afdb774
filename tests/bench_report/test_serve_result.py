"""Reading `vllm bench serve` result files (samples in its --save-result format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pair_benchmark.serve_result import ResultFileError, load_serve_result, parse_serve_result

SAMPLES = Path(__file__).with_name("samples")


def test_prefill_speed_is_prompt_over_ttft() -> None:
    result = load_serve_result(SAMPLES / "prefill_12k_warm.json")
    data = json.loads((SAMPLES / "prefill_12k_warm.json").read_text(encoding="utf-8"))
    assert result.case == "prefill_12k_warm"
    assert result.input_lens == (12288, 12288, 12288)
    expected = sorted(12288 / t for t in data["ttfts"])[1]
    assert result.median_prefill_tok_s == pytest.approx(expected)
    assert result.median_prefill_tok_s == pytest.approx(1346.0, abs=1.0)


def test_decode_speed_counts_tokens_not_chunks() -> None:
    # Under speculative decoding a streamed chunk carries several tokens: itls has fewer entries
    # than tokens, so speed must come from output_lens, not from the number of chunks.
    result = load_serve_result(SAMPLES / "decode_code.json")
    data = json.loads((SAMPLES / "decode_code.json").read_text(encoding="utf-8"))
    first = data["itls"][0]
    assert len(first) < data["output_lens"][0] - 1
    assert result.decode_tok_s[0] == pytest.approx((data["output_lens"][0] - 1) / sum(first))
    assert result.median_decode_tok_s == pytest.approx(42.08, abs=0.01)


def test_decode_speed_falls_back_to_tpot_without_itls() -> None:
    data = json.loads((SAMPLES / "decode_korean_prose.json").read_text(encoding="utf-8"))
    del data["itls"]
    result = parse_serve_result(data, fallback_case="x")
    assert result.median_decode_tok_s == pytest.approx(1000.0 / data["median_tpot_ms"])


def test_case_falls_back_to_file_stem(tmp_path: Path) -> None:
    data = json.loads((SAMPLES / "prefill_24k_warm.json").read_text(encoding="utf-8"))
    del data["case"]
    path = tmp_path / "prefill_24k_warm.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_serve_result(path).case == "prefill_24k_warm"


def test_failed_requests_are_left_out() -> None:
    data = json.loads((SAMPLES / "prefill_12k_warm.json").read_text(encoding="utf-8"))
    data["ttfts"][1] = 0.0
    data["output_lens"][1] = 0
    data["failed"] = 1
    result = parse_serve_result(data, fallback_case="x")
    assert len(result.input_lens) == 2
    assert result.failed == 1


def test_metadata_is_kept_as_extra() -> None:
    result = load_serve_result(SAMPLES / "prefill_12k_cold.json")
    assert result.extra["pair"] == "pair_one"
    assert "input_lens" not in result.extra


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"completed": 1}', "missing median_ttft_ms, total_input_tokens"),
        (
            '{"completed": 0, "input_lens": [5], "output_lens": [0], "ttfts": [0.0],'
            ' "median_ttft_ms": 0, "total_input_tokens": 5, "total_output_tokens": 0}',
            "no successful request",
        ),
    ],
)
def test_unusable_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ResultFileError, match=message):
        load_serve_result(path)


def test_summary_only_result_uses_medians() -> None:
    # Without --save-detailed, vllm bench serve drops the per-request lists.
    data = json.loads((SAMPLES / "decode_code.json").read_text(encoding="utf-8"))
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        del data[key]
    result = parse_serve_result(data, fallback_case="x")
    assert result.input_lens == (96, 96, 96)
    assert result.median_decode_tok_s == pytest.approx(1000.0 / data["median_tpot_ms"])
    assert result.median_prefill_tok_s == pytest.approx(96 / (data["median_ttft_ms"] / 1000))
