#!/usr/bin/env bash
# The GPU check of the engine, for a session lent a GPU host (the device
# tool). Here, once (~10 min on 2 cores):
#
#   scripts/gpu-check.sh prepare     # .gpu/: the CUDA engine + SmolLM2 cut to 8 blocks (~57 MB)
#
# then on the GPU host, from the repo root, with `.gpu` carried:
#
#   scripts/gpu-check.sh run         # device tool: run(command="bash scripts/gpu-check.sh run", carry=[".gpu"])
#
# `run` prints the GPU, which CUDA libraries the binary finds, `parity` (the
# candle CUDA executor against the CPU kernels, greedy step by step: exits
# non-zero when they part beyond the bounds of src/parity.rs) and `bench` on
# the GPU and on the host's CPU, and copies the logs to $OUT. The whole
# SmolLM2 file (98 MB) does not fit the 64 MiB a device call carries; its
# first 8 blocks compute exactly what the full model's do
# (`switchyard-engine gguf-slice`, tested).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"

case "${1:-}" in
  prepare)
    mkdir -p .gpu
    grep -qxF '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
    bash scripts/build-engine-cuda.sh "$PWD/.gpu/engine-cuda.xz"
    cpu="${CARGO_TARGET_DIR:-$CACHE/target}/release/switchyard-engine"
    [ -x "$cpu" ] || (cd workers/engine && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}" cargo build --release)
    "$cpu" gguf-slice "$CACHE/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf" .gpu/smol-8.gguf --layers 8
    du -ch .gpu/* | tail -n 1
    ;;
  run)
    out="${OUT:-/tmp/gpu-check}"
    mkdir -p "$out"
    # Where GPU hosts usually keep the driver and the CUDA libraries.
    for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu; do
      [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
    done
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt" || true
    xz -dc .gpu/engine-cuda.xz >/tmp/sy-engine-cuda && chmod +x /tmp/sy-engine-cuda
    ldd /tmp/sy-engine-cuda | grep -E 'cuda|cublas|curand|nvrtc' | tee "$out/ldd.txt"
    model=.gpu/smol-8.gguf
    set +e
    /tmp/sy-engine-cuda parity --device cuda --model "$model" --steps 16 2>&1 | tee "$out/parity.txt"
    parity=${PIPESTATUS[0]}
    /tmp/sy-engine-cuda bench --device cuda --model "$model" --streams 1,4,8,16,64 --tokens 64 --repeats 3 2>&1 | tee "$out/bench-cuda.txt"
    /tmp/sy-engine-cuda bench --device cpu --model "$model" --streams 1,8 --tokens 64 --repeats 3 2>&1 | tee "$out/bench-cpu.txt"
    echo "parity exit $parity" | tee -a "$out/parity.txt"
    exit "$parity"
    ;;
  *)
    echo "usage: scripts/gpu-check.sh prepare|run" >&2
    exit 2
    ;;
esac
