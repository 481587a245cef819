"""bench/bench_share.py end to end at its smoke size (--smoke): share groups and a KIP-848 consumer group
read a topic filled in one transaction, and a paced one. No timing assertions: only that the tool runs, that every
record reached the consumers once and was acknowledged, and that the figures land in the table and JSON."""
import json
import os
import subprocess
import sys

import pytest

from tests.broker import ROOT

BENCH_SHARE = os.path.join(ROOT, "bench", "bench_share.py")
# short record locks: a record the client did not get (a dropped ShareFetch response) is back in 1 s, not 30 s
SHORT_LOCKS = ["--broker-override", "group.share.record.lock.duration.ms=1000",
               "--broker-override", "group.share.min.record.lock.duration.ms=1000"]


@pytest.mark.slow
@pytest.mark.timeout(280)
def test_bench_share_smoke(tmp_path):
    pytest.importorskip("confluent_kafka")
    out = tmp_path / "share.json"
    done = subprocess.run([sys.executable, BENCH_SHARE, "--smoke", *SHORT_LOCKS, "--out", str(out)],
                          capture_output=True, text=True, timeout=270, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "share / consumer group x1" in done.stdout and "latency," in done.stdout, done.stdout
    result = json.loads(out.read_text())
    runs = result["throughput"]["runs"]
    assert sorted((r["kind"], r["consumers"]) for r in runs) == [("group", 1), ("group", 2), ("share", 1),
                                                                 ("share", 2)]
    total = 2000  # SMOKE's records, committed in one transaction per run
    for r in runs:
        assert r["complete"] and r["records"] == total, r
        assert r["unique"] == total and r["duplicates"] == 0 and r["missing"] == 0, r
        assert r["acknowledged"] == total, r  # share: the broker's ACCEPT counter; group: consumed once each
        assert r["records_s"] > 0 and r["broker_cpu_s"] >= 0
    lat = result["latency"]["runs"]
    assert sorted(r["kind"] for r in lat) == ["group", "share"]
    for r in lat:
        assert r["missing"] == 0 and r["duplicates"] == 0, r
        assert r["timed"] > 0 and r["p50_ms"] is not None and r["p99_ms"] >= r["p50_ms"], r
    assert set(result["knobs"]["share_consumer"]) >= {"max.poll.records", "fetch.wait.max.ms", "fetch.min.bytes"}
