#!/usr/bin/env bash
# Sets up a virtualenv with text-dedup and datatrove, builds the release
# `simhashdb`, and runs dedup_datasets.py (see its docstring). From the
# repository root:
#   python/benches/dedup_datasets.sh [--sizes 1,10] [--timeout 1800] [--keep-data]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import text_dedup, datatrove, tokenizers, orjson, spacy, psutil' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        text-dedup==0.4.0 datatrove==0.10.1 tokenizers orjson spacy "xxhash<4" psutil
fi
cargo build --release --bin simhashdb
exec "$venv/bin/python" python/benches/dedup_datasets.py "$@"
