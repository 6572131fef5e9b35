#!/usr/bin/env bash
# The engine's Rust tests, built in release mode so they share compiled
# dependencies with the engine binary (the target dir is cached outside the
# clone; see README).
set -euo pipefail
cd "$(dirname "$0")/../workers/engine"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/switchyard/target}"
exec cargo test --release "$@"
