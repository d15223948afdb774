"""Run in a subprocess by test_standin_model.py: the stand-in's model under the real plugin.

Its PYTHONPATH holds the overlay's sources, the staged lab vllm tree and lab/standin, as the
stand-in image does. It registers the overlay's plugin, loads the model, calls each layer at
small and large M, and writes OUT/probe.json (the route, the overlay's per-path counts around
each call) and OUT/cases.pt (inputs, outputs and the Marlin reference) for the test to judge.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch

SIZES = (1, 16, 1024)
PATHS = ("marlin", "unpack")
FORWARDS = (("five words of prompt here", 3), (" ".join(["w"] * 1024), 2))


def main(out: Path) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s [%(name)s] %(message)s")
    from marlin_standin import reference_linear
    from vllm_dualpath import calls, plugin
    from vllm_standin import model

    source = importlib.import_module(model.SOURCE_MODULE)
    kernel = importlib.import_module(model.KERNEL_MODULE)
    lab_function = source.apply_fp8_marlin_linear
    plugin.register()
    route = plugin.registered_route()
    loaded = model.load()
    assert loaded is not None, "the model did not load"
    result: dict[str, Any] = {
        "route": None
        if route is None
        else {
            "version": route.vllm_version,
            "via_kernel_class": route.via_kernel_class,
            "original_is_lab_function": route.original is lab_function,
            "source_is_wrapper": source.apply_fp8_marlin_linear is route.wrapper,
            "kernel_is_wrapper": kernel.apply_fp8_marlin_linear is route.wrapper,
            "modules": sorted(m.__name__ for m in route.modules),
        },
        "calls": [],
        "forwards": [],
    }
    tensors: list[dict[str, torch.Tensor]] = []
    generator = torch.Generator().manual_seed(7)
    last = calls.snapshot()  # the overlay's own per-path counts
    for index, spec in enumerate(model.LAYERS):
        layer = loaded.layers[index]
        scales = layer.weight_scale_inv if spec.block else layer.weight_scale
        assert scales is not None
        for m in SIZES:
            x = torch.randn(m, spec.size_k, generator=generator).to(torch.bfloat16)
            output = loaded.layer(index, x)
            now = calls.snapshot()
            delta = {path: now[path] - last[path] for path in PATHS}
            last = now
            expected = reference_linear(
                x, layer.weight, scales, spec.size_n, spec.size_k, layer.bias
            )
            result["calls"].append({"layer": index, "m": m, "delta": delta})
            tensors.append({"x": x, "output": output, "expected": expected})
    for prompt, max_tokens in FORWARDS:
        work = model.Work.of_request(prompt, {"max_tokens": max_tokens})
        model.run(work)
        now = calls.snapshot()
        delta = {path: now[path] - last[path] for path in PATHS}
        last = now
        result["forwards"].append({"tokens": work.tokens, "max_tokens": max_tokens, **delta})
    torch.save(tensors, out / "cases.pt")
    (out / "probe.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
