"""The source checks itself: ruff, the layer contracts (import-linter) and no import circles, so a
wrong-way import or an undefined name fails the suite, not only ci/lint.sh."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "ci"))

import import_cycles  # noqa: E402  (ci/import_cycles.py)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    pytest.importorskip("ruff")
    result = run(sys.executable, "-m", "ruff", "check", "pybroker", "spark_source", "bench", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_are_kept():
    lint_imports = shutil.which("lint-imports") or pytest.skip("import-linter is not installed")
    result = run(lint_imports, "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 broken" in result.stdout, result.stdout


def test_no_import_circles():
    assert import_cycles.cycles(["pybroker", "pyspark_pybroker"]) == []


def test_import_circles_are_found(tmp_path, monkeypatch):
    """The circle check itself: two modules importing each other inside functions are one circle."""
    package = tmp_path / "circular_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from circular_pkg import b\n    return b\n")
    (package / "b.py").write_text("from circular_pkg import a\n")
    (package / "c.py").write_text("from circular_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles.cycles(["circular_pkg"]) == [["circular_pkg.a", "circular_pkg.b"]]
