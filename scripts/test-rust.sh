#!/usr/bin/env bash
# The engine's Rust tests, built in release mode so they share compiled
# dependencies with the engine binary (the target dir is cached outside the
# clone; see README).
set -euo pipefail
cd "$(dirname "$0")/../workers/engine"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/switchyard/target}"
# --tests: unit + integration tests, no doc-tests (there are none, and an
# empty "0 passed" run must not be the last word of the log).
exec cargo test --release --tests "$@"
