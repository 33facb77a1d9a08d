"""The installed package: stubs for every public name, docstrings on
everything, py.typed, and numpy as the only dependency."""

import ast
import importlib.metadata
import inspect
import sys
from pathlib import Path

import simhashdb
from simhashdb import _simhashdb

PACKAGE = Path(simhashdb.__file__).parent


def stub_names():
    """Top-level names of the extension's stub, and each class's members."""
    tree = ast.parse((PACKAGE / "_simhashdb.pyi").read_text())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return names, members


def public(obj):
    return [n for n in dir(obj) if not n.startswith("_")]


def test_the_package_ships_its_stubs_and_py_typed():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_simhashdb.pyi").is_file()


def test_the_stubs_describe_every_public_name_and_member():
    names, members = stub_names()
    exported = {n for n in public(_simhashdb) if n != "_baselines"}
    assert exported == names
    for cls in ("Simhasher", "Index", "Match", "Doc", "Plan"):
        runtime = set(public(getattr(_simhashdb, cls)))
        assert runtime == {m for m in members[cls] if not m.startswith("_")}, cls


def test_everything_public_has_a_docstring():
    undocumented = []
    for name in simhashdb.__all__:
        obj = getattr(simhashdb, name)
        if callable(obj) and not (obj.__doc__ or "").strip():
            undocumented.append(name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for member in public(obj):
                if not (getattr(obj, member).__doc__ or "").strip():
                    undocumented.append(f"{name}.{member}")
    assert undocumented == []
    assert "Index" in simhashdb.__doc__ and simhashdb.Index.open.__doc__.startswith("Opens the index")


def test_numpy_is_the_only_dependency():
    requires = importlib.metadata.requires("simhashdb") or []
    runtime = [r for r in requires if "extra ==" not in r]
    assert [r.split(">")[0].split("=")[0].strip() for r in runtime] == ["numpy"]


def test_signatures_show_the_defaults():
    assert str(inspect.signature(simhashdb.find_all)) == "(fingerprints, k=3, blocks=None)"
    assert str(inspect.signature(simhashdb.clusters)) == "(fingerprints, k=3, blocks=None)"
    assert "durability=None" in str(inspect.signature(simhashdb.Index.open))
    assert str(inspect.signature(simhashdb.Index.query)) == "(self, /, fingerprint, k=None)"
    if sys.version_info >= (3, 10):
        assert str(inspect.signature(simhashdb.Simhasher)) == "(tokenizer='words', shingle=1, weighting='tf')"
    else:
        # An abi3 class carries no text signature before 3.10 (CPython's
        # PyType_FromSpec ignores it), so `help()` shows the constructor from
        # the docstring's second paragraph instead.
        assert simhashdb.Simhasher.__doc__.split("\n\n")[1] == (
            'Simhasher(tokenizer="words", shingle=1, weighting="tf")'
        )
