"""The `simhashdb` command that `pip install` of the wheel puts on PATH, and
`python -m simhashdb`: both run the command line tool bundled in the wheel,
with its arguments, output and exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simhashdb
import simhashdb.__main__ as launcher


def bundled():
    """The bundled tool's path; skips when this installation has none (a
    `maturin develop` build), unless $SIMHASHDB_WHEEL_HAS_CLI says the
    installed wheel must carry it."""
    try:
        return launcher.binary()
    except FileNotFoundError:
        if os.environ.get("SIMHASHDB_WHEEL_HAS_CLI"):
            raise
        pytest.skip("this installation carries no command line tool (python/build-wheel.sh builds a wheel with it)")


def console_script():
    """The `simhashdb` console script pip installed next to this interpreter."""
    name = "simhashdb.exe" if os.name == "nt" else "simhashdb"
    script = Path(sys.executable).parent / name
    assert script.is_file(), f"{script}: pip installed no simhashdb command"
    return str(script)


def records(tmp_path):
    base = "the storage engine keeps its tables sorted and merges them in the background while readers"
    texts = [base + " go on", "a recipe for bread: flour, water, salt and an oven hot enough", base + " go on!"]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    return texts, path


@pytest.mark.parametrize("how", ["console script", "python -m simhashdb"])
def test_the_installed_command_deduplicates_as_the_package_does(tmp_path, how):
    bundled()
    command = [console_script()] if how == "console script" else [sys.executable, "-m", "simhashdb"]
    version = subprocess.run(command + ["--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("simhashdb ")
    texts, path = records(tmp_path)
    out = subprocess.run(
        command + ["dedup", str(path), "--id-field", "id", "--emit", "drop"],
        capture_output=True,
        text=True,
        check=True,
    )
    drops = [json.loads(line) for line in out.stdout.splitlines()]
    result = simhashdb.dedup(texts)
    assert [d["id"] for d in drops] == np.flatnonzero(~result.keep).tolist() == [2]
    assert drops[0]["duplicate_of"] == int(result.duplicate_of[2]) == 0
    assert "1 dropped" in out.stderr
    # A usage error: exit code 2 and the tool's message, from the tool itself.
    bad = subprocess.run(command + ["dedup", str(path), "--keep", "oldest"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "--keep" in bad.stderr and "newest:FIELD" in bad.stderr


def test_the_launcher_says_what_is_missing_when_no_tool_is_bundled(tmp_path):
    # A copy of the package without _bin/: the launcher's message, exit 1.
    import shutil

    package = Path(simhashdb.__file__).resolve().parent
    copy = tmp_path / "simhashdb"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("_bin", "__pycache__"))
    run = subprocess.run(
        [sys.executable, "-m", "simhashdb", "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert run.returncode == 1
    assert "carries no command line tool" in run.stderr
