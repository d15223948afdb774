"""The decode, unpack-bandwidth and replay-order benchmarks: arithmetic, reports, arguments and
the replay order they time with (no GPU needed)."""

from __future__ import annotations

import itertools
import math

import pytest

import bench_decode
import bench_order
import bench_unpack
from bench_paths import PATHS
from vllm_dualpath import timing

MACHINE = {"gpu": "test GPU", "nvidia_smi": "test GPU, 1.0", "l2_bytes": 50 << 20}


# --- the replay order ---------------------------------------------------------------------------


def test_a_fixed_order_replays_the_variants_as_given_every_round() -> None:
    assert timing.replay_order(["a", "b", "c"], 3) == [["a", "b", "c"]] * 3


def test_a_shuffled_order_replays_each_variant_once_a_round_in_changing_orders() -> None:
    rounds = timing.replay_order(["a", "b", "c", "d"], 40, "shuffled", seed=1)
    assert len(rounds) == 40
    assert all(sorted(r) == ["a", "b", "c", "d"] for r in rounds)
    # No variant always follows the same one.
    predecessors = {name: set() for name in "abcd"}
    for r in rounds:
        for before, after in itertools.pairwise(r):
            predecessors[after].add(before)
    assert all(len(p) == 3 for p in predecessors.values())
    assert rounds == timing.replay_order(["a", "b", "c", "d"], 40, "shuffled", seed=1)
    assert rounds != timing.replay_order(["a", "b", "c", "d"], 40, "shuffled", seed=2)


def test_an_unknown_order_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="order"):
        timing.replay_order(["a"], 1, "reversed")
    with pytest.raises(ValueError, match="order"):
        timing.median_call_us_side_by_side({"a": [lambda: None]}, order="reversed")


def test_the_fixed_runs_replay_bench_pys_paths_in_bench_pys_order() -> None:
    assert bench_decode.FIXED_PATHS == PATHS
    assert bench_order.RUNS["bench"] == (PATHS, "fixed", False)
    assert bench_order.RUNS["swapped"][0] == ("bf16", "marlin", "dualpath", "unpack_cublas")


# --- decode ---------------------------------------------------------------------------------------


def _decode_result() -> dict:
    rows = []
    for m, fixed_dual, shuffled_dual, again in ((1, 103.0, 100.5, 99.8), (16, 102.0, 100.2, 100.4)):
        for path, us in (("bf16", 140.0), ("marlin", 100.0), ("unpack_cublas", 300.0)):
            rows.append(
                {"n": 4100, "k": 5120, "m": m, "order": "fixed", "path": path, "median_us": us}
            )
            rows.append(
                {"n": 4100, "k": 5120, "m": m, "order": "shuffled", "path": path, "median_us": us}
            )
        rows += [
            {
                "n": 4100,
                "k": 5120,
                "m": m,
                "order": "fixed",
                "path": "dualpath",
                "median_us": fixed_dual,
            },
            {
                "n": 4100,
                "k": 5120,
                "m": m,
                "order": "shuffled",
                "path": "dualpath",
                "median_us": shuffled_dual,
            },
            {
                "n": 4100,
                "k": 5120,
                "m": m,
                "order": "shuffled",
                "path": "marlin_again",
                "median_us": again,
            },
        ]
    kernels = {
        "4100x5120": {
            "marlin": ["marlin", "copy"],
            "dualpath": ["marlin", "copy"],
            "bit_equal": True,
        }
    }
    return {"machine": MACHINE, "rows": rows, "kernels": kernels}


def test_decode_ratios_worst_cell_and_spread() -> None:
    result = _decode_result()
    table = bench_decode.ratios(result)
    assert table[(4100, 5120, 1, "fixed")] == {"dual_over_marlin": pytest.approx(1.03)}
    assert table[(4100, 5120, 16, "shuffled")]["marlin_again_over_marlin"] == pytest.approx(1.004)
    assert bench_decode.worst(result, "fixed") == (pytest.approx(1.03), "4100x5120 M=1")
    assert bench_decode.worst(result, "shuffled") == (pytest.approx(1.005), "4100x5120 M=1")
    assert bench_decode.spread(result) == pytest.approx(0.004)
    assert math.isnan(bench_decode.spread(result, "fixed"))


def test_decode_report_judges_each_order_against_the_target() -> None:
    text = bench_decode.markdown(_decode_result())
    assert "| fixed | 1.030 | 4100x5120 M=1 | - | **no** |" in text
    assert "| shuffled | 1.005 | 4100x5120 M=1 | 0.004 | yes |" in text
    assert "| 4100x5120 | 16 | 100.00 | 100.20 | 1.020 | 1.002 | 1.004 |" in text
    assert "same for Marlin and the op: 1 of 1 shapes; outputs bit-equal: 1 of 1" in text
    lines = bench_decode.summary(_decode_result())
    assert lines[0].startswith("fixed: worst dual/Marlin 1.030") and "Marlin/Marlin" not in lines[0]
    assert lines[1].endswith("Marlin/Marlin off by at most 0.004")


def test_decode_plot_is_written(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    bench_decode.plot(_decode_result(), tmp_path / "decode.png")
    assert (tmp_path / "decode.png").stat().st_size > 0


# --- unpack bandwidth -----------------------------------------------------------------------------


def test_rotation_covers_several_l2_sizes_with_two_sets_at_least() -> None:
    l2 = 50 << 20
    per_set = 3 * 5120 * 768
    sets = bench_unpack.rotation_sets(per_set, l2)
    assert sets * per_set >= 4 * l2 > (sets - 1) * per_set
    assert bench_unpack.rotation_sets(3 * 75776 * 5120, l2) == 2
    assert bench_unpack.rotation_sets(per_set, l2, factor=8) * per_set >= 8 * l2
    with pytest.raises(ValueError):
        bench_unpack.rotation_sets(0, l2)


def test_the_copy_moves_the_unpacks_bytes_per_call() -> None:
    for n, k in ((7168, 5120), (4100, 5120), (2880, 2880), (5120, 768), (3, 5)):
        each_way = bench_unpack.copy_bytes_each_way(n, k)
        assert each_way % 16 == 0
        assert 3 * n * k - 32 < bench_unpack.moved_bytes(n, k, "copy_engine") <= 3 * n * k
        assert bench_unpack.moved_bytes(n, k, "copy_kernel") == 2 * each_way
        assert bench_unpack.moved_bytes(n, k, "unpack") == 3 * n * k
        assert bench_unpack.moved_bytes(n, k, "convert") == 3 * n * k


def _unpack_result() -> dict:
    n, k = 1024, 1024  # 3 MiB per call: 1 us = 3.15 TB/s
    moved = 3 * n * k

    def us(gbps: float) -> float:
        return moved / (gbps * 1e9) * 1e6

    copy_us = bench_unpack.moved_bytes(n, k, "copy_engine") / 3000e9 * 1e6
    shapes = []
    for mode, unpack, best in (("block", 2400.0, 2850.0), ("none", 2700.0, 2800.0)):
        times = {
            "unpack": us(unpack),
            "unpack_one_output": us(3000.0),
            "copy_engine": copy_us,
            "copy_kernel": copy_us * 1.1,
            "convert": us(2900.0),
            "kt4w4n": us(unpack),
            "kt8w4n": us(best),
        }
        shapes.append(
            {"n": n, "k": k, "mode": mode, "sets": 5, "median_us": times, "same_bits": True}
        )
    return {"machine": MACHINE, "l2_factor": 4, "shapes": shapes}


def test_unpack_shares_of_copy_and_the_best_tiling() -> None:
    result = _unpack_result()
    gbps = bench_unpack.bandwidths(result)[("1024x1024", "block")]
    assert gbps["unpack"] == pytest.approx(2400.0)
    assert gbps["copy_engine"] == pytest.approx(3000.0)
    share = bench_unpack.of_copy(gbps)
    assert share["unpack"] == pytest.approx(0.8)
    assert share["unpack_one_output"] == pytest.approx(1.0)
    assert bench_unpack.best_tiling(result, "block") == ("kt8w4n", pytest.approx(0.95))
    assert bench_unpack.best_tiling(result, "none")[0] == "kt8w4n"
    assert bench_unpack.best_tiling({"shapes": []}, "block")[0] == ""


def test_unpack_report_and_plot(tmp_path) -> None:
    text = bench_unpack.markdown(_unpack_result())
    assert (
        "| 1024x1024 | 128x128 block | 5 | 3000 / 2727 | 2400, 80% | 100% | kt8w4n 95% | 97% |"
        in text
    )
    assert "Best tiling over all shapes, scales block: kt8w4n (worst shape 95%)." in text
    result = _unpack_result() | {"bench_copy_gbps": 3200.0}
    text = bench_unpack.markdown(result, "kt8w4n")
    assert "bench.py's 2 GiB device copy 3200 GB/s." in text
    assert "| 2400, 80% | 100% | 2850, 95%, 89% | kt8w4n 95% | 97% |" in text
    assert "| - | kt8w4n 95% |" in bench_unpack.markdown(result, "kt16w4k")
    pytest.importorskip("matplotlib")
    bench_unpack.plot(_unpack_result(), tmp_path / "unpack.png", "kt8w4n")
    assert (tmp_path / "unpack.png").stat().st_size > 0


def test_the_report_names_the_unpacks_defaults_as_a_tiling() -> None:
    from vllm_dualpath import unpack

    name = bench_unpack.default_tiling()
    assert name.startswith(f"kt{unpack.DEFAULT_K_TILES}w{unpack.DEFAULT_NUM_WARPS}")
    assert name in {bench_unpack.tiling_name(*t) for t in bench_unpack.TILINGS["block"]}


def test_tiling_names_say_tiles_warps_and_grid_order() -> None:
    assert bench_unpack.tiling_name(8, 4, False) == "kt8w4n"
    assert bench_unpack.tiling_name(16, 4, True) == "kt16w4k"
    names = [bench_unpack.tiling_name(*t) for t in bench_unpack.TILINGS["block"]]
    assert len(set(names)) == len(names) and "kt4w4n" in names


# --- replay order at large M ----------------------------------------------------------------------


def _order_result() -> dict:
    rows = []
    runs = {
        "bench": {
            "bf16": 19200.0,
            "marlin": 47500.0,
            "unpack_cublas": 17600.0,
            "dualpath": 19600.0,
        },
        "shuffled": {
            "bf16": 19000.0,
            "marlin": 47000.0,
            "unpack_cublas": 19800.0,
            "dualpath": 19700.0,
            "unpack_again": 19900.0,
        },
    }
    for run, paths in runs.items():
        for path, us in paths.items():
            clock = None if run == "bench" else 1600.0
            rows.append(
                {
                    "n": 75776,
                    "k": 5120,
                    "m": 16384,
                    "run": run,
                    "path": path,
                    "median_us": us,
                    "sm_clock_mhz": clock,
                }
            )
    probes = {
        "75776x5120 M=16384": {
            "kernels": {"unpack_cublas": ["unpack", "gemm"], "dualpath": ["unpack", "gemm"]},
            "calls_during_capture": {"marlin": 0, "unpack": 2},
            "scratch_before": 387973120,
            "scratch_after": 387973120,
        }
    }
    return {"machine": MACHINE, "rows": rows, "probes": probes}


def test_order_ratios() -> None:
    table = bench_order.rows_by_run(_order_result())
    bench = bench_order.ratios(table[("75776x5120", 16384, "bench")])
    assert bench["dual_over_unpack"] == pytest.approx(19600 / 17600)
    assert bench["unpack_over_bf16"] == pytest.approx(17600 / 19200)
    assert "unpack_again_over_unpack" not in bench
    shuffled = bench_order.ratios(table[("75776x5120", 16384, "shuffled")])
    assert shuffled["dual_over_best"] == pytest.approx(19700 / 19800)
    assert shuffled["unpack_again_over_unpack"] == pytest.approx(19900 / 19800)


def test_order_report_and_plot(tmp_path) -> None:
    text = bench_order.markdown(_order_result())
    assert "| 75776x5120 | 16384 | bench | 19200 | 47500 | 17600 | 19600 | 1.114 |" in text
    assert "| -, -, -, - |" in text and "| 1600, 1600, 1600, 1600 |" in text
    assert "the same for unpack + cuBLAS and the op: True (2 each)" in text
    assert "{'marlin': 0, 'unpack': 2}" in text
    pytest.importorskip("matplotlib")
    bench_order.plot(_order_result(), tmp_path / "order.png")
    assert (tmp_path / "order.png").stat().st_size > 0


# --- arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [bench_decode, bench_unpack, bench_order])
def test_each_benchmark_measures_or_reports_never_both(module, tmp_path) -> None:
    with pytest.raises(SystemExit):
        module.parse_args([])
    with pytest.raises(SystemExit):
        module.parse_args(["--out", str(tmp_path / "a.json"), "--report", str(tmp_path / "b.json")])
    assert module.parse_args(["--report", "x.json"]).out is None


def test_bench_py_replays_in_a_fresh_order_unless_told() -> None:
    import bench

    assert bench.parse_args(["--out", "x.json"]).order == "shuffled"
    assert bench.parse_args(["--out", "x.json", "--order", "fixed"]).order == "fixed"
    with pytest.raises(SystemExit):
        bench.parse_args(["--out", "x.json", "--order", "reversed"])


def test_benchmark_defaults() -> None:
    decode = bench_decode.parse_args(["--out", "d.json"])
    assert [int(m) for m in decode.m.split(",")] == [1, 2, 4, 8, 16, 20]
    assert decode.fixed_shapes == "qkv_proj,odd_n_4100"
    unpack = bench_unpack.parse_args(["--out", "u.json"])
    assert unpack.l2_factor == 4 and not unpack.no_tilings and unpack.older is None
    with pytest.raises(SystemExit):
        bench_unpack.parse_args(["--out", "u.json", "--l2-factor", "0"])
    order = bench_order.parse_args(["--out", "o.json"])
    assert order.shapes == "lm_head" and order.m == "8192,16384"


def test_reports_from_json_need_no_gpu(tmp_path, capsys) -> None:
    import json

    for module, result in (
        (bench_decode, _decode_result()),
        (bench_unpack, _unpack_result()),
        (bench_order, _order_result()),
    ):
        path = tmp_path / f"{module.__name__}.json"
        path.write_text(json.dumps(result))
        markdown = tmp_path / f"{module.__name__}.md"
        assert module.main(["--report", str(path), "--markdown", str(markdown)]) == 0
        assert markdown.read_text().startswith(("GPU: test GPU",))
    assert "worst dual/Marlin" in capsys.readouterr().out
