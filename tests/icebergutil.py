"""Helpers of the Iceberg table tests (and bench/bench_iceberg.py): a topic's table read back with pyiceberg,
the topic read back with confluent-kafka read_committed in the same row shape so they compare as lists, and
the broker's translation worker processes."""
import os
import time

from tests.clientutil import wait_until

DEADLINE = 90


def catalog(data_dir: str, uri: str | None = None, warehouse: str | None = None):
    """The catalog a broker with default Iceberg settings uses (its first log dir), or the given one (SQL
    catalogs keep tables under a catalog name: the broker's is "pybroker")."""
    import os

    from pyiceberg.catalog import load_catalog
    os.makedirs(os.path.join(data_dir, "iceberg"), exist_ok=True)  # the test may look before the broker writes
    return load_catalog("pybroker", type="sql", uri=uri or f"sqlite:///{data_dir}/iceberg/catalog.db",
                        warehouse=warehouse or f"file://{data_dir}/iceberg/warehouse")


def table_rows(cat, topic: str, namespace: str = "kafka", columns=("key", "value")) -> list[tuple]:
    """(partition, offset, timestamp ms, key, value, headers) of every row, sorted; [] before the table exists."""
    from pyiceberg.exceptions import NoSuchTableError
    try:
        table = cat.load_table((namespace, topic))
    except NoSuchTableError:
        return []
    rows = []
    for r in table.scan().to_arrow().to_pylist():
        k = r["kafka"]
        headers = tuple((h["key"], h["value"]) for h in (k["headers"] or []))
        rows.append((k["partition"], k["offset"], round(k["timestamp"].timestamp() * 1000), k["key"],
                     *(r.get(c) for c in columns[1:]), headers))
    return sorted(rows)


def topic_rows(bootstrap: str, topic: str, partitions: int, timeout: float = DEADLINE) -> list[tuple]:
    """The same rows from a read_committed consume of the whole topic (up to its last stable offset)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        rows, done = [], {p for p, e in ends.items() if e == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    if m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                    continue
                raise AssertionError(m.error())
            ts = m.timestamp()[1]
            rows.append((m.partition(), m.offset(), ts, m.key(), m.value(),
                         tuple((k, v) for k, v in (m.headers() or []))))
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
        assert len(done) == partitions, (done, ends)
        return sorted(rows)
    finally:
        c.close()


def wait_equal(cat, bootstrap: str, topic: str, partitions: int, timeout: float = DEADLINE):
    """Wait (bounded) until the table holds exactly the topic's committed records; both row lists."""
    want = topic_rows(bootstrap, topic, partitions)
    got = wait_until(lambda: table_rows(cat, topic) == want, timeout=timeout, interval=0.5)
    return table_rows(cat, topic) if not got else want, want


def no_duplicate_offsets(rows) -> bool:
    keys = [(r[0], r[1]) for r in rows]
    return len(keys) == len(set(keys))


def worker_pids(broker_pid: int) -> list[int]:
    """The broker's child processes running the translation worker."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == broker_pid and b"pybroker.iceberg.worker" in cmd:
            out.append(int(pid))
    return out
