"""The calibrated op is as fast as the faster path at every M, on a served model's own shapes.

The calibration measures two layer shapes of one TP2 rank of GLM-5.3-Flash, from its config as
the role reads it: the shared expert's gate/up (in 42 of its layers) and the dense MLP's. Then
the op with that table, Marlin and unpack + cuBLAS are timed side by side at every M of a fine
grid. Set DUALPATH_RESULTS_DIR to keep every median as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from model_configs import GLM53_FLASH
from vllm_dualpath import calibrate, calibration, op, settings, table_key, timing
from vllm_dualpath.marlin_reference import apply_fp8_marlin_linear
from vllm_dualpath.model_shapes import rank_shapes

SHAPE_NAMES = ("shared_gate_up", "dense_gate_up")
MAX_M = 4096
# Every 8 tokens to 512, every 16 to 1024 (Marlin's tile edges among them), then every 96.
FINE_GRID = [*range(24, 512, 8), *range(512, 1025, 16), *range(1088, MAX_M + 1, 96)]
TOLERANCE = 1.03


def _dual_call(layer, x):
    dual = torch.ops.dualpath.fp8_marlin_linear

    def call() -> torch.Tensor:
        return dual(x, layer.qweight, layer.scales, None, layer.size_n, layer.size_k, None, True)

    return call


@pytest.mark.parametrize("name", SHAPE_NAMES)
def test_the_calibrated_op_is_within_3_percent_of_the_faster_path(name, generator) -> None:
    shape = next(s for s in rank_shapes(GLM53_FLASH, 2) if s.name == name)
    current = settings.Settings()
    op.configure(current, None)
    op.install_marlin_apply(apply_fp8_marlin_linear)
    block = (128, 128)
    first_m = current.small_m_max + 1
    ranges = calibrate.measure_shape(
        shape, first_m, MAX_M, block, current.channel_scale, timing.DEFAULT_BUDGET_S, generator
    )
    key = table_key.TableKey("", "", table_key.kernels_digest(), ((shape.n, shape.k),))
    table = calibration.CalibrationTable(
        {(shape.n, shape.k): ranges}, key=key, measured_up_to_m=MAX_M
    )
    op.configure(current, table)

    layers = calibrate.marlin_layers(
        shape.n, shape.k, calibrate.weight_set_count(shape.n, shape.k), block, generator
    )
    rows = []
    try:
        for m in FINE_GRID:
            x = torch.randn(m, shape.k, device="cuda", generator=generator).to(torch.bfloat16)
            medians = timing.median_call_us_side_by_side(
                {
                    "marlin": [calibrate.marlin_call(layer, x) for layer in layers],
                    "unpack_cublas": [
                        calibrate.unpack_call(layer, x, current.channel_scale) for layer in layers
                    ],
                    "dualpath": [_dual_call(layer, x) for layer in layers],
                }
            )
            best = min(medians["marlin"], medians["unpack_cublas"])
            rows.append({"m": m, **medians, "ratio": medians["dualpath"] / best})
    finally:
        op.configure(settings.Settings(), None)
    results_dir = os.environ.get("DUALPATH_RESULTS_DIR")
    if results_dir:
        document = {
            "gpu": torch.cuda.get_device_name(),
            "shape": {"name": shape.name, "n": shape.n, "k": shape.k},
            "unpack_ranges": [list(r) for r in ranges],
            "rows": rows,
        }
        path = Path(results_dir) / f"calibrated-op-{shape.name}.json"
        path.write_text(json.dumps(document, indent=1))
    misses = [row for row in rows if row["ratio"] > TOLERANCE]
    worst = max(rows, key=lambda row: row["ratio"])
    assert not misses, (
        f"{shape.name} {shape.n}x{shape.k}: {len(misses)} of {len(rows)} M over {TOLERANCE}x the "
        f"faster path (worst M={worst['m']}: {worst['ratio']:.3f}); table {ranges}"
    )
