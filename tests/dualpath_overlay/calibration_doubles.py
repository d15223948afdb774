"""Test doubles for calibrate.yml: nvidia-smi and `docker run ... vllm_dualpath.calibrate`.

There is no GPU here. The nvidia-smi double answers the three queries the role and the key make.
The docker double accepts only the calibration's command line (the flags the role must pass, the
mounts it must name, existing sources) and writes what the real calibration writes: a table in
the store named by the key of the model it was given, and the release's link to it. It records
each call, so a test can tell a reuse from a measurement.
"""

from __future__ import annotations

NVIDIA_SMI = r"""#!/bin/sh
case "$*" in
  *--query-gpu=name*) echo "NVIDIA GB10" ;;
  *--query-gpu=driver_version*) echo "580.95.05" ;;
  *--query-compute-apps=pid*) cat "$(dirname "$0")/busy" 2>/dev/null || true ;;
  *) echo "nvidia-smi double: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""

DOCKER = r"""#!/usr/bin/env python3
import json, sys
from pathlib import Path

args = sys.argv[1:]
log = Path(__file__).with_name("docker-calls")
log.open("a").write(json.dumps(args) + "\n")
required = ["run", "--rm", "--name", "dualspark-calibration", "--gpus", "all"]
if args[: len(required)] != required:
    sys.exit(f"docker double: not the calibration's run: {args}")
mounts = {}
for index, word in enumerate(args):
    if word == "--mount":
        fields = dict(part.split("=", 1) for part in args[index + 1].split(",") if "=" in part)
        if not Path(fields["src"]).exists():
            sys.exit(f"docker double: mount source {fields['src']} does not exist")
        mounts[fields["dst"]] = Path(fields["src"])
module = args.index("vllm_dualpath.calibrate")
options = dict(zip(args[module + 1 :: 2], args[module + 2 :: 2]))
needs = ("--model", "--tensor-parallel-size", "--max-m", "--gpu", "--driver", "--store", "--link")
for needed in needs:
    if needed not in options:
        sys.exit(f"docker double: calibrate without {needed}")

def host(path):
    for target, source in mounts.items():
        if path == target or path.startswith(target + "/"):
            return source / path[len(target) :].lstrip("/")
    sys.exit(f"docker double: {path} is not under any mount")

site = [a for a in args if a.startswith("PYTHONPATH=")][0].split("=", 1)[1]
sys.path.insert(0, str(host(site)))
from vllm_dualpath import calibration, model_shapes, table_key

ranks = int(options["--tensor-parallel-size"])
shapes = model_shapes.checkpoint_shapes(host(options["--model"]), ranks)
key = table_key.node_key(shapes, options["--gpu"], options["--driver"])
table = calibration.CalibrationTable({pair: ((64, None),) for pair in key.shapes}, gpu=key.gpu,
                                     key=key, measured_up_to_m=int(options["--max-m"]))
stored = table_key.stored_table(host(options["--store"]), key)
stored.write_text(calibration.dump(table))
table_key.point_link(host(options["--link"]), stored)
print(f"[1/{len(shapes)}] calibrating", file=sys.stderr)
print(f"wrote {options['--store']}/{stored.name}", file=sys.stderr)
"""
