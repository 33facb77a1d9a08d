"""The ``simhashdb`` command: ``python -m simhashdb ARGS`` and the console
script ``simhashdb`` that ``pip install`` puts on PATH both run the command
line tool bundled in the wheel (``simhashdb/_bin/simhashdb``, the same
binary ``cargo build --release`` makes), with the arguments, standard
streams, exit code and signals of the process itself: on POSIX the Python
process is replaced by the tool (``os.execv``)."""

import os
import sys
from pathlib import Path

__all__ = ["main", "binary"]


def binary() -> str:
    """The path of the bundled ``simhashdb`` tool. Raises FileNotFoundError
    when this installation carries none (a package built without it, e.g.
    ``maturin develop``: see the README, "The command line from pip")."""
    name = "simhashdb.exe" if os.name == "nt" else "simhashdb"
    path = Path(__file__).resolve().parent / "_bin" / name
    if not path.is_file():
        raise FileNotFoundError(
            f"this installation of the simhashdb package carries no command line tool ({path} is missing): "
            "install a wheel built with it (python/build-wheel.sh), or build it with `cargo build --release`"
        )
    return str(path)


def main() -> None:
    """Runs the bundled tool with this process's arguments; never returns."""
    try:
        tool = binary()
    except FileNotFoundError as e:
        print(f"simhashdb: {e}", file=sys.stderr)
        sys.exit(1)
    argv = [tool] + sys.argv[1:]
    if os.name == "nt":
        import subprocess

        sys.exit(subprocess.call(argv))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(tool, argv)


if __name__ == "__main__":
    main()
