"""Run the asv history suite and publish its static HTML dashboard, in one command.

    python bench/dashboard.py [--commits RANGE] [--out bench/html] [--quick]

Full run: for every commit in RANGE (an asv/git range: HEAD^! — the default, only HEAD —,
HEAD~10..HEAD, NEW, ALL), asv builds a virtualenv with the commit installed by `pip install .`
and runs every benchmark in bench/benchmarks/ (micro: native core and codecs; macro: a real
broker driven by separate client processes). Benchmarks already measured in that environment are skipped, so the
history grows run after run. Results go to bench/results/, environments to bench/.asv/.
--quick: the micro benchmarks plus one macro case (1 KiB records, 1 partition), each sampled
once, in the current environment and working tree (recorded as HEAD); a few minutes.
Either way the dashboard is then written to --out; serve it with `python -m http.server -d OUT`.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONF = os.path.join(HERE, "asv.conf.json")
QUICK_BENCHMARKS = [r"^micro_", r"^macro_broker\.Broker\."]  # Broker only runs QUICK_CASE with --quick
QUICK_ATTRIBUTES = ["repeat=1", "rounds=1"]  # one sample each


def asv(*args: str, env: dict | None = None) -> None:
    cmd = [sys.executable, "-m", "asv", *args, "--config", CONF]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=HERE, env=env, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", default="HEAD^!", help="commit range to measure (default: HEAD only)")
    ap.add_argument("--out", default=os.path.join(HERE, "html"), help="where to write the dashboard")
    ap.add_argument("--quick", action="store_true", help="small subset, current environment, a few minutes")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    start = time.monotonic()
    asv("machine", "--yes")  # records this machine's description (asv asks for it once otherwise)
    if args.quick:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        bench = [a for b in QUICK_BENCHMARKS for a in ("-b", b)]
        attrs = [a for v in QUICK_ATTRIBUTES for a in ("-a", v)]
        asv("run", "--python=same", "--set-commit-hash", head, "--show-stderr", *bench, *attrs,
            env={**os.environ, "PYBROKER_BENCH_QUICK": "1"})
    else:
        try:
            asv("run", args.commits, "--skip-existing-successful", "--show-stderr")
        except subprocess.CalledProcessError as exc:  # some benchmarks failed: publish what was measured
            print(f"asv run exited with {exc.returncode}; publishing the results it saved", flush=True)
    asv("publish", "--no-pull", "--html-dir", out)
    print(f"\ndashboard written in {time.monotonic() - start:.0f} s: {os.path.join(out, 'index.html')}")
    print(f"open it with:  python -m http.server -d {out} 8000   then http://127.0.0.1:8000/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
