#!/usr/bin/env bash
# Builds the wheel with the command line tool inside it: `pip install` of
# that wheel puts a `simhashdb` command on PATH (and `python -m simhashdb`
# runs it). The tool is the workspace's `cargo build --release --features
# parquet` binary (the wheel's command reads and writes Parquet), stripped, copied to python/simhashdb/_bin/ (not in git), which
# pyproject.toml's [tool.maturin] include puts in the wheel; the console
# script simhashdb.__main__:main runs it.
#
#   python/build-wheel.sh [OUT_DIR]     (default target/wheels; maturin from
#                                        PATH, or $MATURIN)
#
# SIMHASHDB_BIN=PATH puts that already built binary in the wheel instead of
# running `cargo build --release --features parquet` (.ci/test passes the one
# `cargo test --release --features parquet` built: a `cargo build` after it
# compiles Arrow, Parquet and 25 other crates again, because the test-only
# dependencies change the features of shared crates). That binary must have
# the `parquet` feature too.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/wheels}"
maturin="${MATURIN:-maturin}"
bin="${SIMHASHDB_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --bin simhashdb --features parquet
    bin=target/release/simhashdb
elif [ ! -x "$bin" ]; then
    echo "build-wheel.sh: SIMHASHDB_BIN=$bin is not an executable file" >&2
    exit 1
fi
mkdir -p python/simhashdb/_bin
cp "$bin" python/simhashdb/_bin/simhashdb.tmp
strip python/simhashdb/_bin/simhashdb.tmp 2>/dev/null || true
mv python/simhashdb/_bin/simhashdb.tmp python/simhashdb/_bin/simhashdb
"$maturin" build --release --quiet --manifest-path python/Cargo.toml --out "$out"
