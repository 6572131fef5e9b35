#!/usr/bin/env bash
# The GPU check of the engine, for a session lent a GPU host (the device
# tool). Here, once (~10 min on 2 cores):
#
#   scripts/gpu-check.sh prepare     # .gpu/: the CUDA engine + SmolLM2 cut to 8 blocks (~57 MB)
#
# then on the GPU host, from the repo root, with `.gpu` carried:
#
#   scripts/gpu-check.sh run         # device tool: run(command="bash scripts/gpu-check.sh run", carry=[".gpu"])
#   scripts/gpu-check.sh decode-7b   # then: a Qwen2.5-7B-shaped Q4_K GGUF written there, its CUDA decode tok/s
#
# `run` prints the GPU, which CUDA libraries the binary finds, `parity` (the
# candle CUDA executor against the CPU kernels, greedy step by step: exits
# non-zero when they part beyond the bounds of src/parity.rs) and `bench` on
# the GPU and on the host's CPU, and copies the logs to $OUT. The whole
# SmolLM2 file (98 MB) does not fit the 64 MiB a device call carries; its
# first 8 blocks compute exactly what the full model's do
# (`switchyard-engine gguf-slice`, tested).
#
# The qwen2 and gemma3 device paths at their K-quant, Q5_0 and Q8_0 types go
# through `parity` too, on random-weight GGUFs written on the GPU host itself
# (`gguf-random`, SmolLM2's vocabulary from the slice; Gemma 3 270M's own
# file is 253 MB). `scripts/gpu-check.sh random-parity` runs that part here
# with the CPU build on candle's CPU device, as a check of the script.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"

# random_parity ENGINE DEVICE OUT: parity of each architecture/type pair
# below on DEVICE; the exit status is the number of pairs that failed.
random_parity() {
  local engine=$1 device=$2 out=$3 failed=0 f
  for case in qwen2:q4_k qwen2:q6_k gemma3:q4_k gemma3:q6_k gemma3:q5_0 gemma3:q8_0; do
    f="/tmp/sy-random-${case/:/-}.gguf"
    "$engine" gguf-random "$f" --arch "${case%%:*}" --type "${case##*:}" --vocab-from .gpu/smol-8.gguf --seed 1
    echo "== $case" | tee -a "$out/parity-random.txt"
    # pipefail: the pipeline fails when parity does.
    "$engine" parity --device "$device" --model "$f" --steps 16 2>&1 | tee -a "$out/parity-random.txt" || failed=$((failed + 1))
    rm -f "$f"
  done
  echo "random-weight parity: $failed failed" | tee -a "$out/parity-random.txt"
  return "$failed"
}

# cuda_engine: the CUDA libraries on LD_LIBRARY_PATH (where GPU hosts
# usually keep the driver and them) and the carried engine unpacked to
# /tmp/sy-engine-cuda, for `run` and `decode-7b` alike.
cuda_engine() {
  for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
  done
  # Always unpacked: a warm host may still hold an older carry's binary.
  xz -dc .gpu/engine-cuda.xz >/tmp/sy-engine-cuda && chmod +x /tmp/sy-engine-cuda
}

case "${1:-}" in
  prepare)
    mkdir -p .gpu
    # git-path: .git is a file in a worktree.
    exclude="$(git rev-parse --git-path info/exclude)"
    mkdir -p "$(dirname "$exclude")"
    grep -qxF '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
    bash scripts/build-engine-cuda.sh "$PWD/.gpu/engine-cuda.xz"
    cpu="${CARGO_TARGET_DIR:-$CACHE/target}/release/switchyard-engine"
    [ -x "$cpu" ] || (cd workers/engine && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}" cargo build --release)
    "$cpu" gguf-slice "$CACHE/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf" .gpu/smol-8.gguf --layers 8
    du -ch .gpu/* | tail -n 1
    ;;
  run)
    out="${OUT:-/tmp/gpu-check}"
    mkdir -p "$out"
    cuda_engine
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt" || true
    ldd /tmp/sy-engine-cuda | grep -E 'cuda|cublas|curand|nvrtc' | tee "$out/ldd.txt"
    model=.gpu/smol-8.gguf
    set +e
    /tmp/sy-engine-cuda parity --device cuda --model "$model" --steps 16 2>&1 | tee "$out/parity.txt"
    parity=${PIPESTATUS[0]}
    random_parity /tmp/sy-engine-cuda cuda "$out"
    random=$?
    /tmp/sy-engine-cuda bench --device cuda --model "$model" --streams 1,4,8,16,64 --tokens 64 --repeats 3 2>&1 | tee "$out/bench-cuda.txt"
    /tmp/sy-engine-cuda bench --device cpu --model "$model" --streams 1,8 --tokens 64 --repeats 3 2>&1 | tee "$out/bench-cpu.txt"
    echo "parity exit $parity, random-weight parity failures $random" | tee -a "$out/parity.txt"
    [ "$parity" = 0 ] && [ "$random" = 0 ]
    ;;
  decode-7b)
    # The Phase 39 bar's figure (issue 17): decode tok/s of a Qwen2.5-7B-
    # shaped Q4_K GGUF on the GPU, random weights written on the GPU host
    # itself (~3.9 GB; nothing that size is carried). Its own device call,
    # after `run`: device tool run(command="bash scripts/gpu-check.sh
    # decode-7b", carry=[".gpu"], timeout_s=540). What the figure means
    # against the real file: src/random_gguf.rs, QWEN25_7B.
    out="${OUT:-/tmp/gpu-check}"
    mkdir -p "$out"
    cuda_engine
    f=/tmp/sy-qwen25-7b-q4_k.gguf
    start=$(date +%s)
    /tmp/sy-engine-cuda gguf-random "$f" --arch qwen2 --type q4_k --shape qwen2.5-7b --vocab-from .gpu/smol-8.gguf --seed 1 2>&1 | tee "$out/decode-7b.txt"
    echo "written in $(( $(date +%s) - start )) s: $(du -h "$f" | cut -f1)" | tee -a "$out/decode-7b.txt"
    /tmp/sy-engine-cuda bench --device cuda --model "$f" --streams 1,8 --tokens 64 --prompt-tokens 128 --constrained-streams 0 --repeats 2 2>&1 | tee -a "$out/decode-7b.txt"
    ;;
  random-parity)
    cpu="${CARGO_TARGET_DIR:-$CACHE/target}/release/switchyard-engine"
    out="${OUT:-/tmp/gpu-check}"
    mkdir -p "$out"
    : >"$out/parity-random.txt"
    random_parity "$cpu" cpu "$out"
    ;;
  *)
    echo "usage: scripts/gpu-check.sh prepare|run|decode-7b|random-parity" >&2
    exit 2
    ;;
esac
