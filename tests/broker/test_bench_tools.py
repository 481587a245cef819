"""bench/compare.py, bench/bench_iceberg.py and bench/bench_cleaner_stall.py end to end: tiny workloads against
real brokers.

No timing assertions: only that the tools run, measure something and write their outputs.
"""
import json
import os
import subprocess
import sys

import pytest

from tests.broker import ROOT

COMPARE = os.path.join(ROOT, "bench", "compare.py")
BENCH_ICEBERG = os.path.join(ROOT, "bench", "bench_iceberg.py")
BENCH_STALL = os.path.join(ROOT, "bench", "bench_cleaner_stall.py")


def test_compare_against_one_broker(broker, tmp_path):
    workload = tmp_path / "tiny.json"
    workload.write_text(json.dumps({"name": "tiny", "topics": 1, "partitionsPerTopic": 2, "messageSize": 200,
                                    "consumerPerSubscription": 1, "producerRate": 0, "testDurationSeconds": 1}))
    out = tmp_path / "result"
    done = subprocess.run([sys.executable, COMPARE, "--workload", str(workload),
                           "--target", f"live={broker.bootstrap}", "--runs", "1", "--rates", "0.5,max",
                           "--seconds", "1.5", "--out", str(out)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "medians over 1 run(s)" in done.stdout
    table = [line.split() for line in done.stdout.splitlines() if line.startswith("live ")]
    assert [row[1] for row in table] == ["0.5", "max"], done.stdout
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(out.with_suffix(".json").read_text())
    steps = result["runs"][0]["live"]
    assert len(steps) == 2
    for step in steps:
        assert step["acked"] > 0 and step["errors"] == 0
        assert step["received"] == step["acked"]  # the consumer read back all that was produced
        assert step["e2e_p99_ms"] is not None


def test_compare_spawns_its_own_broker(tmp_path):
    workload = tmp_path / "tiny.json"
    workload.write_text(json.dumps({"name": "tiny", "messageSize": 100, "consumerPerSubscription": 0,
                                    "producerRate": 1000, "testDurationSeconds": 1}))
    out = tmp_path / "spawned"
    done = subprocess.run([sys.executable, COMPARE, "--workload", str(workload), "--target", "spawn:pybroker",
                           "--target", "alt=spawn:pybroker:PYBROKER_TRANSFER=sendfile", "--runs", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    names = {line.split()[0] for line in done.stdout.splitlines() if line.split()[:1] in (["pybroker"], ["alt"])}
    assert names == {"pybroker", "alt"}, done.stdout
    assert out.with_suffix(".png").stat().st_size > 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["rates"] == [0.1]  # the workload's producerRate, 1000 x 100 B/s
    for name in ("pybroker", "alt"):
        assert result["runs"][0][name][0]["acked"] > 0


def test_bench_iceberg_translation_and_produce_parts(tmp_path):
    """Parts 1 and 3 of the Iceberg benchmark with 2 MB each: the table catches up with the topic and the
    figures land in the table printed and in the JSON."""
    pytest.importorskip("pyiceberg")
    pytest.importorskip("confluent_kafka")
    out = tmp_path / "iceberg.json"
    done = subprocess.run([sys.executable, BENCH_ICEBERG, "--parts", "1,3", "--translate-megabytes", "2",
                           "--translate-runs", "1", "--megabytes", "2", "--runs", "1", "--on-target-lag-ms", "1000",
                           "--out", str(out)], capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 translation / plain consume" in done.stdout and "3 produce on / off" in done.stdout, done.stdout
    result = json.loads(out.read_text())
    [run] = result["part1"]["runs"]
    assert run["records"] == 2_000_000 // 1024 + 4  # + the producer's warm-up record per partition
    assert run["translate_records_s"] > 0 and run["consume_records_s"] > 0
    assert run["translate_parquet_bytes"] > 2_000_000  # random values: the Parquet files hold every byte
    rounds = result["part3"]["runs"]
    assert [r["on"] for r in rounds] == [False, True]
    assert all(r["mb_s"] > 0 and r["records"] == 2_000_000 // 1024 for r in rounds)
    assert result["part3"]["medians"]["on_over_off"] > 0
    assert "part2" not in result and "part4" not in result


def test_bench_cleaner_stall_measures_a_cleaning_broker(tmp_path):
    done = subprocess.run([sys.executable, BENCH_STALL, "--kinds", "helper", "--repeat", "1", "--seconds", "2",
                           "--hogs", "1", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = [line.split() for line in done.stdout.splitlines() if line.startswith("helper ") and "sends" in line]
    assert int(row[1]) > 0 and "medians over 1 rounds" in done.stdout, done.stdout
    assert os.listdir(tmp_path) == []  # the broker's data went with it
