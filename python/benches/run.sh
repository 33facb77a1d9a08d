#!/usr/bin/env bash
# Builds the package with the Rust baselines into a fresh virtualenv with the
# peers (faiss-cpu, 1e0ng's simhash) and runs bench.py. From the repository root:
#   python/benches/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/python-bench-venv
rm -rf "$venv" target/wheels-bench
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check maturin numpy faiss-cpu simhash
"$venv/bin/maturin" build --release --quiet --manifest-path python/Cargo.toml \
    --features rust-baselines --out target/wheels-bench
"$venv/bin/pip" install --quiet --disable-pip-version-check target/wheels-bench/simhashdb-*.whl
"$venv/bin/python" python/benches/bench.py "$@"
