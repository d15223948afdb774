#!/usr/bin/env bash
# The dual path's GPU proof on a CUDA machine, which needs neither vLLM nor network access: build
# vLLM's Marlin FP8 kernels from the sdist, run the GPU tests against them, calibrate on this GPU,
# benchmark the dual path with that calibration per layer, then a stack of layers in forward order.
#
#   tools/gpu-proof.sh .cache/sdist/vllm-0.33.0.tar.gz OUTDIR [extra benchmark arguments]
#
# Writes OUTDIR/{env.txt,build.log,tests.log,calibrate.log,calibration.json,bench.log,
# dualpath.json,model.log,model.json}. Every stage has a time limit, so one stuck stage cannot eat the others' time.
set -uo pipefail
sdist=$1
out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
package="$root/files/vllm_dualpath"
mkdir -p "$out"
# The package (what the wheel ships) and the benchmarks beside it.
export PYTHONUNBUFFERED=1 PYTHONPATH="$package/src:$package/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_DUALPATH_MARLIN_LIB="$root/build/marlin/libvllm_marlin_fp8.so"
unset TRITON_INTERPRET

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
    --format=csv
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch",
    torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  nvcc --version | tail -1
} 2>&1 | tee "$out/env.txt"

if [ ! -f "$VLLM_DUALPATH_MARLIN_LIB" ]; then
  timeout 300 python3 "$root/tools/marlin/build.py" --sdist "$sdist" --out "$root/build/marlin" \
    2>&1 | tee "$out/build.log" || exit 1
fi

# --confcutdir: the CPU suite's conftest would switch Triton to its interpreter.
(cd "$package" && timeout 300 python3 -m pytest -v -p no:cacheprovider \
  --confcutdir tests/gpu tests/gpu) > "$out/tests.log" 2>&1
tests_status=$?
tail -3 "$out/tests.log"

timeout 300 python3 -m vllm_dualpath.calibrate --out "$out/calibration.json" 2>&1 \
  | tee "$out/calibrate.log" || exit 1
timeout 500 python3 "$package/benchmarks/bench.py" --calibration "$out/calibration.json" \
  --out "$out/dualpath.json" "$@" 2>&1 | tee "$out/bench.log" || exit 1
timeout 300 python3 "$package/benchmarks/bench_model.py" --out "$out/model.json" 2>&1 \
  | tee "$out/model.log" || exit 1
exit "$tests_status"
