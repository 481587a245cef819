"""One topic's translation on a real SQLite catalog, fed fetched batches directly: resuming after a crash,
two writers of one partition, and a crash between the DLQ table's commit and the main table's."""
import datetime
import io
import json

import pytest

pytest.importorskip("pyiceberg")
fastavro = pytest.importorskip("fastavro")
import pyarrow as pa  # noqa: E402

from pybroker.iceberg import catalog as cat  # noqa: E402
from pybroker.iceberg.settings import IcebergSettings, TopicTable  # noqa: E402
from pybroker.iceberg.translator import TopicWriter  # noqa: E402
from pybroker.iceberg.values import RegistryClient  # noqa: E402
from tests.unit.test_iceberg_values import Registry  # noqa: E402

PERSON = {"type": "record", "name": "P", "fields": [{"name": "n", "type": "long"}]}


@pytest.fixture
def settings(tmp_path):
    return IcebergSettings(catalog_uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")


def batch(partition, offsets, values=None):
    n = len(offsets)
    ts = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    return pa.record_batch({
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array(values if values is not None else [b"v%d" % o for o in offsets], pa.binary()),
        "topic": pa.array(["t"] * n), "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()), "timestamp": pa.array([ts] * n, pa.timestamp("ms", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int32()),
        "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))})


def offsets(settings, name):
    table = cat.open_catalog(settings).load_table(("kafka", name))
    return sorted((r["kafka"]["partition"], r["kafka"]["offset"]) for r in table.scan().to_arrow().to_pylist())


def test_a_new_writer_resumes_where_the_table_is(settings):
    catalog = cat.open_catalog(settings)
    w = TopicWriter("t", TopicTable(mode="key_value"), settings, catalog)
    assert w.acquire(0) is None and w.acquire(1) is None  # no table yet: from the log start
    w.add(batch(0, [0, 1, 2]))
    w.add(batch(1, [0, 1]))
    assert w.flush() == set()
    w.add(batch(0, [3, 4]))  # read, never committed: the process dies here
    again = TopicWriter("t", TopicTable(mode="key_value"), settings, catalog)
    assert again.acquire(0) == 3 and again.acquire(1) == 2
    again.add(batch(0, [3, 4, 5]))
    assert again.flush() == set()
    assert offsets(settings, "t") == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 0), (1, 1)]


def test_two_writers_of_one_partition_write_it_once(settings):
    """A deposed leader's worker and the new leader's, both with the same rows: the second commit finds the
    partition moved on, writes nothing of it and reads again from the table."""
    old = TopicWriter("t", TopicTable(mode="key_value"), settings, cat.open_catalog(settings))
    new = TopicWriter("t", TopicTable(mode="key_value"), settings, cat.open_catalog(settings))
    old.acquire(0)
    new.acquire(0)
    new.add(batch(0, [0, 1, 2]))
    old.add(batch(0, [0, 1]))
    assert new.flush() == set()
    assert old.flush() == {0}
    assert old.resync({0}) == {0: 3}
    assert offsets(settings, "t") == [(0, 0), (0, 1), (0, 2)]


def test_a_crash_between_the_dlq_commit_and_the_main_commit(settings):
    registry = Registry({"/schemas/ids/1": (200, {"schema": json.dumps(PERSON)})})
    try:
        client = RegistryClient(registry.url)
        cfg = TopicTable(mode="value_schema_id_prefix")
        good = [b"\x00\x00\x00\x00\x01" + _avro({"n": i}) for i in range(3)]
        values = [good[0], b"junk", good[1], b"\x01bad", good[2]]
        first = TopicWriter("t", cfg, settings, cat.open_catalog(settings), client)
        first.acquire(0)
        first.add(batch(0, [0, 1, 2, 3, 4], values))
        data = pa.Table.from_batches(first.pending.batches)
        main_rows, dlq_rows = first._rows(data)
        first._commit_dlq(dlq_rows, {0: 5})  # the DLQ table committed, then the process dies
        assert offsets(settings, "t~dlq") == [(0, 1), (0, 3)]
        second = TopicWriter("t", cfg, settings, cat.open_catalog(settings), client)
        assert second.acquire(0) is None  # the main table holds nothing of partition 0 yet
        second.add(batch(0, [0, 1, 2, 3, 4], values))
        assert second.flush() == set()
        assert offsets(settings, "t~dlq") == [(0, 1), (0, 3)]  # no row twice
        assert offsets(settings, "t") == [(0, 0), (0, 2), (0, 4)]
        reasons = [r["reason"] for r in cat.open_catalog(settings).load_table(("kafka", "t~dlq")).scan()
                   .to_arrow().to_pylist()]
        assert all(reasons)
    finally:
        registry.stop()


def _avro(record) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(PERSON), record)
    return buf.getvalue()
