"""A Python with quixstreams for tests/quix_app.py, in a virtualenv of its own.

quixstreams pins confluent-kafka below the newest release; installed beside the test suite it would
pull every other test's librdkafka back with it, so it lives in ``~/.cache/pybroker-quixstreams``
(created on first use from PyPI, reused afterwards). The application talks to the broker over the
network only, so the virtualenv needs nothing of pybroker.
"""
import os
import subprocess
import sys

QUIXSTREAMS = "quixstreams==3.28.1"
VENV = os.path.join(os.path.expanduser("~"), ".cache", "pybroker-quixstreams", QUIXSTREAMS.replace("==", "-"))
INSTALL_TIMEOUT_S = 900


def quixstreams_python() -> tuple[str | None, str]:
    """(path of the virtualenv's python, "") or (None, why it could not be made)."""
    python = os.path.join(VENV, "bin", "python")
    if os.path.exists(os.path.join(VENV, ".ready")):
        return python, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", VENV], check=True, capture_output=True,
                       timeout=INSTALL_TIMEOUT_S)
        subprocess.run([python, "-m", "pip", "install", "--quiet", QUIXSTREAMS], check=True, capture_output=True,
                       timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        return None, f"cannot install {QUIXSTREAMS} in {VENV}: {exc} {detail.decode(errors='replace')[-500:]}"
    open(os.path.join(VENV, ".ready"), "w").close()
    return python, ""
