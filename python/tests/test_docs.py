"""The README's Python quick start and examples/scrapy_pipeline.py run as
documented (with the real interpreter and the installed package)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import simhashdb

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_python_quick_start_runs_and_says_what_it_shows(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    # The quick start is the README's one Python block that imports the
    # package (another shows a standard-library client of the HTTP service,
    # another simhashdb.spark, run by test_spark.py; those of simhashdb.dedup
    # run in test_dedup.py).
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", readme, re.S)
        if "import simhashdb" in b and "simhashdb.dedup(" not in b
    ]
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    fps = scope["fps"]
    # The values the comments show.
    assert simhashdb.hamming(fps[0], fps[1]) == 0
    assert simhashdb.find_all(fps, k=3).tolist() == [[0, 1]]
    assert simhashdb.clusters(fps, k=3).tolist() == [0, 0, 2]
    with simhashdb.Index.open(tmp_path / "pages") as index:
        assert [m.id for m in index.query(fps[0])] == [0, 1]
        assert index.get_doc(simhashdb.doc_id("https://example.com/b")).name == "https://example.com/b"
        assert index.get(simhashdb.doc_id("https://example.com/a")) is None
        assert len(index) == 4
    assert isinstance(fps, np.ndarray)


def test_the_scrapy_style_pipeline_example_drops_the_copies():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "scrapy_pipeline.py")],
        check=True, capture_output=True, text=True,
    ).stdout.splitlines()
    assert out[0] == "new  https://news.example/storage"
    assert out[1].startswith("drop https://mirror.example/storage repeats https://news.example/storage")
    assert out[2] == "new  https://recipes.example/bread"
    assert out[3].startswith("drop https://other.example/bread repeats https://recipes.example/bread")
    assert out[3].endswith("(after a restart)")
    assert len(out) == 4
