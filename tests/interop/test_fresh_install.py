"""A clean first run: a copy of the tree installed with plain ``pip install`` into a fresh virtualenv builds
every native module with only a compiler and the Python headers — no xxHash package: where this runs as
root with ``unshare``, the system's xxhash.h is shadowed by a header that fails the build if included,
so only the copy shipped in native/csrc can serve — and ``pybroker serve`` starts without a warning.
(The same per Python version, with the whole suite: ci/test-pythons.sh.)"""
import os
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEM_HEADER = "/usr/include/xxhash.h"


def tracked_copy(dest: str) -> None:
    """The tree as a user's clone has it: tracked files and new ones not ignored, nothing built."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(os.path.join(dest, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(dest, name))


def clean_env() -> dict:
    """This environment without PYTHONPATH (the Spark tests put this checkout on it for their workers): the
    virtualenv must import only what it installed."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def install_command(venv: str, src: str, tmp: str) -> list:
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", src]
    if os.path.exists(SYSTEM_HEADER) and os.geteuid() == 0 and shutil.which("unshare"):
        poison = os.path.join(tmp, "poison.h")
        with open(poison, "w") as f:
            f.write('#error "the system xxhash.h was used, not native/csrc/xxhash.h"\n')
        return ["unshare", "-m", "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", poison,
                SYSTEM_HEADER, *pip]
    return pip


@pytest.mark.skipif(not shutil.which("git") or not os.path.isdir(os.path.join(ROOT, ".git")),
                    reason="needs the git checkout to copy from")
def test_a_fresh_virtualenv_builds_every_native_module_and_serves_quietly(tmp_path):
    src, venv, run = str(tmp_path / "src"), str(tmp_path / "venv"), tmp_path / "run"
    tracked_copy(src)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    built = subprocess.run(install_command(venv, src, str(tmp_path)), capture_output=True, text=True, timeout=900,
                           env=clean_env())
    assert built.returncode == 0, built.stderr[-4000:]
    python = os.path.join(venv, "bin", "python")
    run.mkdir()
    load_all = ("import importlib; from pybroker import core; "
                "print(*[importlib.import_module(f'pybroker._native.{n}').__file__ for n in core.MODULES])")
    loaded = subprocess.run([python, "-W", "error", "-c", load_all], cwd=run, capture_output=True, text=True,
                            timeout=120, env=clean_env())
    assert loaded.returncode == 0, loaded.stderr
    assert all(path.startswith(venv) and path.endswith(".so") for path in loaded.stdout.split()), loaded.stdout
    ready = run / "ready"
    with open(run / "err", "w") as err:
        proc = subprocess.Popen([python, "-m", "pybroker", "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                                 "--override", f"log.dirs={run / 'data'}", "--ready-file", str(ready)],
                                cwd=run, stdout=subprocess.DEVNULL, stderr=err, env=clean_env())
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), (run / "err").read_text()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, (run / "err").read_text()
    noisy = [line for line in (run / "err").read_text().splitlines() if " level=INFO " not in line]
    assert not noisy, noisy
