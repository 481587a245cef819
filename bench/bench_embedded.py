"""Embedded broker start-to-ready time: ``EmbeddedBroker`` in process and in-process mode.

    python bench/bench_embedded.py [--runs 10] [--json out.json]

Each run starts a broker on a fresh temporary data dir and measures, from just before ``start()``:

* ``ready``: ``start()`` returned (process mode: the child's ``--ready-file`` appeared; in-process:
  ``Broker.start()`` finished on the broker's loop thread);
* ``answered``: a first ApiVersions v0 round trip on a new connection completed (the broker serves);

then ``close()`` (a clean stop) is timed too. Modes:

* ``process``: ``python -m pybroker serve`` in a child (interpreter start and imports included);
* ``inprocess-cold``: a fresh interpreter that has imported ``pybroker.embedded`` starts an
  in-process broker (the broker modules' import time is included, as in a test session's first use);
* ``inprocess-warm``: repeated in-process starts in this one process (modules already imported).

Also printed, for where the time goes: ``python -c pass`` and ``python -c "import <serve path
modules>"`` (interpreter start and import time of ``pybroker serve``), medians of the same runs.
Medians (and min/max) over ``--runs``.

Bytecode: ``--bytecode cached`` (the default) lets the child interpreters write and use ``.pyc``
files in a temporary ``PYTHONPYCACHEPREFIX`` (one discarded warm-up start per mode fills it), as
an installed package has them (pip compiles at install); ``--bytecode env`` keeps the environment
as it is (with ``PYTHONDONTWRITEBYTECODE=1`` every start compiles pybroker's sources again).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pybroker.embedded import EmbeddedBroker  # noqa: E402

SERVE_IMPORTS = "import pybroker.cli, pybroker.broker, pybroker.config, pybroker.logs, pybroker.net.server"


def api_versions(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        body = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv(s, 4))[0]
        _recv(s, size)


def _recv(s, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def one_start(mode: str) -> dict:
    t0 = time.perf_counter()
    b = EmbeddedBroker(mode=mode).start()
    t1 = time.perf_counter()
    api_versions(b.port)
    t2 = time.perf_counter()
    b.close()
    t3 = time.perf_counter()
    return {"ready": t1 - t0, "answered": t2 - t0, "close": t3 - t2}


COLD_CHILD = f"""
import json, sys, time
sys.path.insert(0, {ROOT!r})
sys.path.insert(0, {os.path.join(ROOT, 'bench')!r})
import bench_embedded
print(json.dumps(bench_embedded.one_start("inprocess")))
"""


def cold_inprocess() -> dict:
    out = subprocess.run([sys.executable, "-c", COLD_CHILD], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed_python(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
    return time.perf_counter() - t0


def summarize(samples: list) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json")
    parser.add_argument("--bytecode", choices=("cached", "env"), default="cached")
    args = parser.parse_args()
    runs = max(1, min(args.runs, 100))
    if args.bytecode == "cached":  # inherited by every child interpreter started below
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench-embedded-pyc-")
    print(f"bytecode: {args.bytecode} (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')}, "
          f"PYTHONPYCACHEPREFIX={os.environ.get('PYTHONPYCACHEPREFIX')})")
    results = {}
    for name, fn in (("process", lambda: one_start("process")), ("inprocess-cold", cold_inprocess),
                     ("inprocess-warm", lambda: one_start("inprocess"))):
        fn()  # warm-up, discarded (fills the bytecode cache)
        samples = [fn() for _ in range(runs)]
        results[name] = {k: summarize([s[k] for s in samples]) for k in samples[0]}
    timed_python(SERVE_IMPORTS)  # warm-up
    results["python -c pass"] = {"total": summarize([timed_python("pass") for _ in range(runs)])}
    results["serve-path imports"] = {"total": summarize([timed_python(SERVE_IMPORTS) for _ in range(runs)])}
    print(f"start-to-ready, {runs} runs each (seconds: median [min-max])")
    for name, figures in results.items():
        line = "  ".join(f"{k} {v['median']:.3f} [{v['min']:.3f}-{v['max']:.3f}]" for k, v in figures.items())
        print(f"{name:20s} {line}")
    if args.bytecode == "cached":
        shutil.rmtree(os.environ["PYTHONPYCACHEPREFIX"], ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
