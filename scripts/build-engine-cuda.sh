#!/usr/bin/env bash
# Builds the CUDA engine (`--features cuda`) on a machine with no CUDA
# toolkit and no GPU, for carrying to a GPU host:
#
#   scripts/build-engine-cuda.sh [OUT]     # default OUT: ~/.cache/switchyard/engine-cuda.xz
#
# - nvcc, its front-end pieces and the CUDA headers come from NVIDIA's PyPI
#   wheels (CUDA 13.0; the cu12 nvcc wheels carry only ptxas), unpacked
#   under ~/.cache/switchyard/cuda13;
# - candle links the CUDA libraries by name (-lcuda -lcublas ...), so the
#   link uses stub libraries generated here from the symbols it needs, with
#   the real sonames (libcuda.so.1, libcublas.so.13, ...): at run time the
#   GPU host's own driver and CUDA 13 libraries are loaded, exactly as with
#   NVIDIA's own stubs;
# - PTX is built for CUDA_COMPUTE_CAP (default 90, Hopper).
#
# On the GPU host: xz -d engine-cuda.xz && chmod +x engine-cuda &&
#   ./engine-cuda parity --device cuda && ./engine-cuda bench --device cuda
# ~10 min on 2 cores with a warm crate cache.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
CUDA="$CACHE/cuda13"
OUT="${1:-$CACHE/engine-cuda.xz}"
TARGET="${CARGO_TARGET_DIR_CUDA:-$CACHE/target-cuda}"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"

if [ ! -x "$CUDA/bin/nvcc" ] || [ ! -x "$CUDA/nvvm/bin/cicc" ] || [ ! -d "$CUDA/include/nv" ]; then
  echo "== fetching nvcc and CUDA headers (PyPI wheels)"
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps -d "$tmp/whl" \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
    nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96
  for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
  mkdir -p "$CUDA"
  cp -r "$tmp"/x/nvidia/cu13/* "$CUDA"/
  chmod +x "$CUDA"/bin/* "$CUDA"/nvvm/bin/*
  rm -rf "$tmp"
fi
"$CUDA/bin/nvcc" --version | tail -n 2

export PATH="$CUDA/bin:$PATH" CUDA_ROOT="$CUDA" CUDA_PATH="$CUDA" CARGO_TARGET_DIR="$TARGET"
# Portable CPU flags (the GPU host's CPU is not this one); the engine's own
# kernels pick AVX-512/AVX2 at run time anyway.
flags="-C target-feature=+avx2,+fma,+f16c -L $CUDA/stubs"
cd workers/engine

if [ ! -f "$CUDA/stubs/libcuda.so" ]; then
  echo "== compiling candle's CUDA kernels and dependencies (first pass, to learn the symbols)"
  # The first link fails (no CUDA libraries): it is only here to produce the
  # objects whose undefined symbols the stubs must define.
  RUSTFLAGS="$flags" cargo build --release --features cuda || true
  syms="$(mktemp)"
  nm -u --format=just-symbols "$TARGET"/release/deps/libcudarc-*.rlib "$TARGET"/release/deps/libcandle_core-*.rlib \
    "$TARGET"/release/build/candle-kernels-*/out/libmoe.a 2>/dev/null | sort -u >"$syms"
  mkdir -p "$CUDA/stubs"
  python3 - "$syms" "$CUDA/stubs" <<'EOF'
import subprocess, sys
syms = [s.strip() for s in open(sys.argv[1]) if s.strip()]
libs = [("cublasLt", "libcublasLt.so.13"), ("cublas", "libcublas.so.13"), ("curand", "libcurand.so.10"),
        ("nvrtc", "libnvrtc.so.13"), ("cudart", "libcudart.so.13"), ("cuda", "libcuda.so.1")]
def lib_of(s):
    for p in ("cublasLt", "cublas", "curand", "nvrtc"):
        if s.startswith(p): return p
    if s.startswith("cuda") or s.startswith("__cuda"): return "cudart"
    if s.startswith("cu"): return "cuda"
for name, soname in libs:
    src = f"{sys.argv[2]}/{name}.c"
    with open(src, "w") as f:
        f.write("/* link-time stub: the real library is loaded at run time */\n")
        f.writelines(f"void {s}(void) {{}}\n" for s in syms if lib_of(s) == name)
    subprocess.check_call(["gcc", "-shared", "-fPIC", "-o", f"{sys.argv[2]}/lib{name}.so", f"-Wl,-soname,{soname}", src])
EOF
  rm -f "$syms"
fi

echo "== building switchyard-engine --features cuda (sm_${CUDA_COMPUTE_CAP})"
RUSTFLAGS="$flags" cargo build --release --features cuda
bin="$TARGET/release/switchyard-engine"
tmpbin="$(mktemp)"
cp "$bin" "$tmpbin" && strip "$tmpbin"
mkdir -p "$(dirname "$OUT")"
xz -T0 -6 -c "$tmpbin" >"$OUT"
rm -f "$tmpbin"
echo "» $OUT ($(du -h "$OUT" | cut -f1)); needs libcuda.so.1 (driver for CUDA 13) and CUDA 13's cudart, cublas, cublasLt, curand, nvrtc on the GPU host"
