"""iceberg.target.lag.ms holds under a steady load: every acknowledged record is in the table (a snapshot whose
progress covers its offset was committed) within the target lag. A bound the feature promises, not a speed
figure (bench/bench_iceberg.py measures the lag's distribution)."""
import json
import time

import pytest

from tests.broker.test_iceberg_tables import create
from tests.clientutil import wait_until
from tests.icebergutil import catalog

pytest.importorskip("pyiceberg")
ck = pytest.importorskip("confluent_kafka")

TARGET_MS = 8000  # the worker commits every TARGET_MS / 2: 4 s of slack for a commit on a loaded machine
SECONDS = 16  # twice the target: a worker that ignored it (one commit at the end) fails by 8 s
RATE = 400  # records/s
TICK_S = 0.05  # the producer sends RATE * TICK_S records a tick


def test_target_lag_holds_under_steady_load(broker_factory):
    b = broker_factory()
    topic = "steady"
    create(b.bootstrap, topic, partitions=2, **{"iceberg.target.lag.ms": str(TARGET_MS)})
    cat = catalog(b.data_dir)
    warm = ck.Producer({"bootstrap.servers": b.bootstrap})  # the worker starts with the first records: not measured
    for part in (0, 1):
        warm.produce(topic, value=b"warm", partition=part)
    assert warm.flush(30) == 0
    assert wait_until(lambda: _progress(cat, topic).get("1", 0) >= 1 and _progress(cat, topic).get("0", 0) >= 1,
                      timeout=60)
    acked: dict = {}  # (partition, offset) -> wall-clock ms of the acknowledgement

    def on_delivery(err, msg):
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = time.time() * 1000
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "acks": "all"})
    start, per_tick = time.monotonic(), int(RATE * TICK_S)
    for tick in range(int(SECONDS / TICK_S)):
        for i in range(per_tick):
            p.produce(topic, value=b"x" * 200, partition=i % 2, on_delivery=on_delivery)
        while time.monotonic() < start + (tick + 1) * TICK_S:  # poll returns early when acknowledgements come
            p.poll(max(0.0, start + (tick + 1) * TICK_S - time.monotonic()))
    assert p.flush(30) == 0
    total = int(SECONDS / TICK_S) * per_tick
    assert len(acked) == total
    ends = {part: max(o for q, o in acked if q == part) + 1 for part in (0, 1)}

    assert wait_until(lambda: all(_progress(cat, topic).get(str(part), 0) >= end for part, end in ends.items()),
                      timeout=60)
    # each snapshot's commit time (the catalog's clock, this machine's) against each record's acknowledgement
    table = cat.load_table(("kafka", topic))
    commits = sorted((s.timestamp_ms, json.loads(s.summary.additional_properties["pybroker.next-offsets"]))
                     for s in table.snapshots())
    lags = []
    for (part, offset), acked_ms in acked.items():
        visible = next(ms for ms, progress in commits if progress.get(str(part), 0) > offset)
        lags.append(max(0.0, visible - acked_ms))
    lags.sort()
    assert lags[-1] <= TARGET_MS, (lags[len(lags) // 2], lags[int(len(lags) * 0.99)], lags[-1])


def _progress(cat, topic) -> dict:
    from pyiceberg.exceptions import NoSuchTableError
    try:
        snap = cat.load_table(("kafka", topic)).current_snapshot()
    except NoSuchTableError:
        return {}
    return json.loads(snap.summary.additional_properties["pybroker.next-offsets"]) if snap else {}
