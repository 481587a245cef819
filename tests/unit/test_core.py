"""The implementation switch: native by default, pure on request, and both really load."""
import os
import subprocess
import sys

import pytest

from pybroker import core

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = "import pybroker.core as c; print(c.IMPL, *[getattr(c, m).__file__ for m in c.MODULES])"


def run_probe(**env):
    clean = {k: v for k, v in os.environ.items() if k != "PYBROKER_IMPL"}
    clean.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=clean, cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.split()


def test_native_core_is_loaded_by_default():
    impl, *files = run_probe()
    assert impl == "native"
    assert len(files) == len(core.MODULES)
    for f in files:
        assert f.endswith(".so") and os.sep + "_native" + os.sep in f, f


def test_pure_core_on_request():
    impl, *files = run_probe(PYBROKER_IMPL="pure")
    assert impl == "pure"
    assert all(f.endswith(".py") and os.sep + "_pure" + os.sep in f for f in files)


def test_unknown_implementation_is_refused():
    clean = dict(os.environ, PYBROKER_IMPL="fast")
    out = subprocess.run([sys.executable, "-c", "import pybroker.core"], env=clean, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "PYBROKER_IMPL" in out.stderr


def test_unknown_module_name():
    with pytest.raises(AttributeError):
        core.load("nonsense")
