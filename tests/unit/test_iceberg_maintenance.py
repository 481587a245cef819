"""Table maintenance on a real SQLite catalog: small-file rewrite and snapshot expiry keep every row and
the progress summary, and a rewrite that loses the race to another commit changes nothing."""
from __future__ import annotations

import datetime
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pybroker.iceberg.catalog import load_or_create, open_catalog, read_progress, table_schema
from pybroker.iceberg.maintenance import expire_snapshots, rewrite_small_files, run_maintenance
from pybroker.iceberg.rows import KAFKA_TYPE
from pybroker.iceberg.settings import PROGRESS_KEY, IcebergSettings

HOUR0 = datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.timezone.utc)
HOUR1 = HOUR0 + datetime.timedelta(hours=1)
MIB = 1024 * 1024
FAR_FUTURE_MS = 10 ** 15


class Topic:
    """A key_value topic table fed like the translator does: small appends, each with progress."""

    def __init__(self, tmp_path, name="events"):
        self.settings = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path}/catalog.db",
                                        warehouse=f"file://{tmp_path}/wh")
        self.warehouse = tmp_path / "wh"
        self.catalog = open_catalog(self.settings)
        self.table = load_or_create(self.catalog, self.settings, name, table_schema("key_value"),
                                    "hour(kafka.timestamp)")
        self.next_offsets: dict[int, int] = {}
        self.appended = 0

    def append(self, hour, count=5, extra=None, table=None, progress=True):
        """``count`` records spread over kafka partitions 0..2 (interleaved, so files are not sorted)."""
        table = table or self.table
        parts, offsets, stamps, values = [], [], [], []
        for i in range(count):
            partition = (self.appended + i * 2) % 3
            offset = self.next_offsets.get(partition, 0)
            self.next_offsets[partition] = offset + 1
            parts.append(partition)
            offsets.append(offset)
            stamps.append(hour + datetime.timedelta(seconds=offset))
            values.append(f"value-{partition}-{offset}".encode())
        self.appended += count
        # Newest records first within the batch: the rewrite has to sort them.
        parts, offsets, stamps, values = parts[::-1], offsets[::-1], stamps[::-1], values[::-1]
        kafka = pa.StructArray.from_arrays(
            [pa.array(parts, pa.int32()), pa.array(offsets, pa.int64()),
             pa.array(stamps, pa.timestamp("us", tz="UTC")), pa.array([0] * count, pa.int32()),
             pa.array([[]] * count, KAFKA_TYPE.field("headers").type), pa.array(values, pa.large_binary())],
            fields=list(KAFKA_TYPE))
        columns = {"kafka": kafka, "key": pa.array(values, pa.large_binary()),
                   "value": pa.array(values, pa.large_binary())}
        if extra is not None:
            columns[extra] = pa.array([f"{extra}-{v.decode()}" for v in values], pa.large_string())
        table.refresh()
        properties = {PROGRESS_KEY: json.dumps({str(p): o for p, o in sorted(self.next_offsets.items())})}
        table.append(pa.table(columns).cast(table.schema().as_arrow()),
                     snapshot_properties=properties if progress else {})

    def rows(self, *extra, table=None):
        """Every row as (partition, offset, value, extra columns...), sorted."""
        table = table or self.table
        table.refresh()
        data = table.scan().to_arrow()
        kafka = data.column("kafka")
        columns = [pc.struct_field(kafka, "partition").to_pylist(), pc.struct_field(kafka, "offset").to_pylist(),
                   data.column("value").to_pylist()] + [data.column(name).to_pylist() for name in extra]
        return sorted(zip(*columns))

    def data_files(self, table=None):
        table = table or self.table
        table.refresh()
        return sorted(task.file.file_path for task in table.scan().plan_files())

    def files_on_disk(self):
        return sorted(os.path.join(d, f) for d, _, names in os.walk(self.warehouse) for f in names
                      if f.endswith((".parquet", ".avro")))


def local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def summary_progress(table):
    return table.current_snapshot().summary.additional_properties.get(PROGRESS_KEY)


def test_rewrite_packs_small_files_and_keeps_rows_and_progress(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(8):
        topic.append(HOUR0)
    for _ in range(2):
        topic.append(HOUR1)
    rows_before = topic.rows()
    files_before = topic.data_files()
    progress_before = summary_progress(topic.table)
    parent = topic.table.current_snapshot().snapshot_id
    assert len(files_before) == 10 and len(rows_before) == 50

    replaced = rewrite_small_files(topic.table, small_bytes=MIB, min_files=3, target_bytes=128 * MIB)

    assert replaced == 8  # the second hour has only two files: below min_files
    files_after = topic.data_files()
    assert len(files_after) == 3
    assert len(set(files_before) & set(files_after)) == 2
    assert topic.rows() == rows_before
    snapshot = topic.table.current_snapshot()
    assert snapshot.parent_snapshot_id == parent
    assert snapshot.summary.operation.value == "overwrite"
    assert summary_progress(topic.table) == progress_before
    assert read_progress(topic.table) == topic.next_offsets

    (new_file,) = set(files_after) - set(files_before)
    kafka = pq.read_table(local(new_file)).column("kafka")
    order = list(zip(pc.struct_field(kafka, "partition").to_pylist(), pc.struct_field(kafka, "offset").to_pylist()))
    assert order == sorted(order) and len(order) == 40

    assert rewrite_small_files(topic.table, small_bytes=MIB, min_files=3, target_bytes=128 * MIB) == 0
    assert topic.table.current_snapshot().snapshot_id == snapshot.snapshot_id


def test_rewrite_that_would_not_reduce_files_commits_nothing(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(4):
        topic.append(HOUR0)
    snapshot_id = topic.table.current_snapshot().snapshot_id
    on_disk = topic.files_on_disk()

    assert rewrite_small_files(topic.table, small_bytes=MIB, min_files=2, target_bytes=1) == 0
    assert topic.table.current_snapshot().snapshot_id == snapshot_id
    assert topic.files_on_disk() == on_disk
    # Files at or above small_bytes are left alone.
    assert rewrite_small_files(topic.table, small_bytes=1, min_files=2, target_bytes=128 * MIB) == 0


def test_rewrite_makes_files_of_at_most_the_target_size(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(6):
        topic.append(HOUR0)
    rows = topic.rows()
    sizes = [task.file.file_size_in_bytes for task in topic.table.scan().plan_files()]
    assert 3 * min(sizes) > 2 * max(sizes)  # so a target of two files' size takes exactly two at a time

    assert rewrite_small_files(topic.table, small_bytes=MIB, min_files=3, target_bytes=2 * max(sizes)) == 6

    assert [task.file.record_count for task in topic.table.scan().plan_files()] == [10, 10, 10]
    assert topic.rows() == rows


@pytest.mark.parametrize("retries", ["0", "4"])  # "4": a table made elsewhere, with pyiceberg's retries on
def test_concurrent_append_makes_the_rewrite_give_up_cleanly(tmp_path, retries):
    topic = Topic(tmp_path)
    with topic.table.transaction() as tx:
        tx.set_properties({"commit.retry.num-retries": retries})
    for _ in range(6):
        topic.append(HOUR0)
    other = topic.catalog.load_table(topic.table.name())  # another broker's handle on the same table
    seen = {}
    on_disk_before = topic.files_on_disk()

    def append_meanwhile():
        written_by_rewrite = topic.files_on_disk()
        topic.append(HOUR0, table=other)
        seen["files"] = topic.data_files(other)
        seen["appended"] = set(topic.files_on_disk()) - set(written_by_rewrite)
        seen["snapshot"] = other.current_snapshot().snapshot_id
        seen["progress"] = summary_progress(other)
        seen["rows"] = topic.rows(table=other)

    replaced = rewrite_small_files(topic.table, small_bytes=MIB, min_files=3, target_bytes=128 * MIB,
                                   before_commit=append_meanwhile)

    assert replaced == 0
    assert topic.table.current_snapshot().snapshot_id == seen["snapshot"]
    assert topic.data_files() == seen["files"] and len(seen["files"]) == 7
    # Only the other writer's files were added: the rewrite's own data files and manifests are gone.
    assert seen["appended"] and set(topic.files_on_disk()) == set(on_disk_before) | seen["appended"]
    assert summary_progress(topic.table) == seen["progress"]
    assert topic.rows() == seen["rows"] and len(seen["rows"]) == 35

    # The next run succeeds and keeps the other writer's progress.
    assert rewrite_small_files(topic.table, small_bytes=MIB, min_files=3, target_bytes=128 * MIB) == 7
    assert topic.rows() == seen["rows"]
    assert summary_progress(topic.table) == seen["progress"]


def test_rewrite_reads_old_files_through_the_evolved_schema(tmp_path):
    from pyiceberg.types import StringType
    topic = Topic(tmp_path)
    for _ in range(4):
        topic.append(HOUR0)
    with topic.table.update_schema() as update:
        update.add_column("note", StringType())
    for _ in range(3):
        topic.append(HOUR0, extra="note")
    rows_before = topic.rows("note")
    assert sum(1 for r in rows_before if r[3] is None) == 20

    assert rewrite_small_files(topic.table, small_bytes=MIB, min_files=3, target_bytes=128 * MIB) == 7

    assert len(topic.data_files()) == 1
    assert topic.rows("note") == rows_before
    assert read_progress(topic.table) == topic.next_offsets


def test_expire_keeps_the_newest_snapshots_and_the_table_scans_fully(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(10):
        topic.append(HOUR0)
    rows = topic.rows()
    history = [s.snapshot_id for s in topic.table.snapshots()]
    lists = {s.snapshot_id: local(s.manifest_list) for s in topic.table.snapshots()}

    assert expire_snapshots(topic.table, max_age_ms=3_600_000, keep=3) == 0  # all are young
    assert expire_snapshots(topic.table, max_age_ms=0, keep=3, now_ms=FAR_FUTURE_MS) == 7

    remaining = [s.snapshot_id for s in topic.table.snapshots()]
    assert sorted(remaining) == sorted(history[-3:])
    assert topic.table.current_snapshot().snapshot_id == history[-1]
    assert topic.rows() == rows
    assert read_progress(topic.table) == topic.next_offsets
    for snapshot_id, path in lists.items():
        assert os.path.exists(path) == (snapshot_id in remaining)
    assert all(os.path.exists(local(f)) for f in topic.data_files())  # every data file is still live


def test_expire_by_age_only_takes_older_snapshots(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(8):
        topic.append(HOUR0)
    snapshots = topic.table.snapshots()
    cutoff = snapshots[4].timestamp_ms
    expected = {s.snapshot_id for s in snapshots[:-2] if s.timestamp_ms < cutoff}

    assert expire_snapshots(topic.table, max_age_ms=1000, keep=2, now_ms=cutoff + 1000) == len(expected)
    assert {s.snapshot_id for s in topic.table.snapshots()} == {s.snapshot_id for s in snapshots} - expected


def test_expire_keeps_the_newest_progress_summary(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(4):
        topic.append(HOUR0)
    carrier = topic.table.current_snapshot().snapshot_id
    progress = read_progress(topic.table)
    topic.append(HOUR0, progress=False)  # a writer that does not record progress (e.g. another tool)
    topic.append(HOUR0, progress=False)
    chain = [s.snapshot_id for s in topic.table.snapshots()[-3:]]
    assert chain[0] == carrier

    # keep=1 alone would keep only the head; the way back to the progress summary stays too.
    assert expire_snapshots(topic.table, max_age_ms=0, keep=1, now_ms=FAR_FUTURE_MS) == 3
    assert sorted(s.snapshot_id for s in topic.table.snapshots()) == sorted(chain)
    assert read_progress(topic.table) == progress


def test_expire_after_rewrite_deletes_the_replaced_files(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(6):
        topic.append(HOUR0)
    small = topic.data_files()
    rows = topic.rows()
    assert rewrite_small_files(topic.table, small_bytes=MIB, min_files=3, target_bytes=128 * MIB) == 6
    assert all(os.path.exists(local(f)) for f in small)  # older snapshots still read them

    assert expire_snapshots(topic.table, max_age_ms=0, keep=1, now_ms=FAR_FUTURE_MS) == 6

    assert not any(os.path.exists(local(f)) for f in small)
    live = topic.data_files()
    assert len(live) == 1 and os.path.exists(local(live[0]))
    parquet_on_disk = [f for f in topic.files_on_disk() if f.endswith(".parquet")]
    assert parquet_on_disk == [local(f) for f in live]
    assert topic.rows() == rows
    assert read_progress(topic.table) == topic.next_offsets


def test_run_maintenance_uses_the_settings(tmp_path):
    topic = Topic(tmp_path)
    for _ in range(5):
        topic.append(HOUR0)
    rows = topic.rows()
    settings = IcebergSettings(snapshot_max_age_ms=3_600_000, snapshots_to_keep=2, small_file_bytes=MIB,
                               small_files_to_rewrite=5, target_file_size_bytes=128 * MIB)

    assert run_maintenance(topic.table, settings) == {"expired": 0, "rewritten": 5}
    assert len(topic.data_files()) == 1
    assert topic.rows() == rows
