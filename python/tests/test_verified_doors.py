"""The Python package checks texts by the same verified rule as the command
line: one stream of texts through `Index.check` and through `simhashdb
check`, each on a new index of texts (k = 6), gives the same verdicts, naming
the same documents with the same rule and similarity. (The library, the
command line and the server are held to each other in
tests/verified_doors.rs.)"""

import random
import subprocess
from pathlib import Path

import pytest
from conftest import cli_binary

from simhashdb import Index, VerifiedMatch, doc_id

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


def stream():
    """Windows of two license texts and a Chinese text, and copies with some
    words or characters replaced (2, 5 and 30 %), shuffled."""
    rng = random.Random(38)
    texts = []
    for name, length, step in (("apache-2.0.txt", 40, 131), ("mpl-2.0.txt", 150, 250)):
        words = (DATA / name).read_text(encoding="utf-8").split()
        for start in range(0, len(words) - length + 1, step):
            window = words[start : start + length]
            texts.append(" ".join(window))
            for percent in (2, 5, 30):
                texts.append(
                    " ".join(rng.choice(words) if rng.randrange(100) < percent else w for w in window)
                )
    zh = [c for c in (DATA / "zh-prose.txt").read_text(encoding="utf-8") if not c.isspace()]
    for start in range(0, len(zh) - 200, 500)[:10]:
        window = zh[start : start + 200]
        texts.append("".join(window))
        for percent in (2, 5):
            texts.append("".join(rng.choice(zh) if rng.randrange(100) < percent else c for c in window))
    rng.shuffle(texts)
    return [(f"https://site.example/{i}", t) for i, t in enumerate(texts)]


@pytest.mark.parametrize("threshold", [None, 0.9])
def test_check_gives_the_command_lines_verdicts_by_the_verified_rule(tmp_path, threshold):
    cli = cli_binary()
    assert cli is not None, "the simhashdb binary is not built (cargo build --release)"
    texts = stream()
    assert len(texts) >= 100
    with Index.open(tmp_path / "python", k=6) as index:
        verdicts = []
        for name, text in texts:
            found = index.check(name, text, threshold=threshold)
            if found is None:
                verdicts.append("new")
            else:
                assert isinstance(found, VerifiedMatch)
                assert found.rule == "sketch" and found.similarity is not None
                assert found.similarity >= (threshold or 0.6)
                verdicts.append(f"dup\t{found.name}\t{found.distance}\t{found.similarity:.3f}\t{found.rule}")
        # A text is found again by a query, and by the sketch.
        name, text = texts[0]
        again = index.query_text(text)
        assert again and again[0].similarity == 1.0 and again[0].rule == "sketch"
        assert again == sorted(again, key=lambda m: (-m.similarity, m.id))
        assert any(m.id == doc_id(name) for m in again) or verdicts[0] != "new"
        with pytest.raises(ValueError):
            index.check("n", "some words", threshold=1.5)
    dups = sum(v != "new" for v in verdicts)
    # The stricter threshold keeps fewer copies out, and still some.
    assert (20 if threshold is None else 5) < dups < len(texts) - 20, dups
    args = [cli, "check", "--db", str(tmp_path / "cli")]
    if threshold is not None:
        args += ["--threshold", str(threshold)]
    out = subprocess.run(
        args,
        input="".join(f"{n}\t{t}\n" for n, t in texts),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.splitlines() == verdicts
