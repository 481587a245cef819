"""Keeping a long-running topic table healthy without changing a row or losing its progress.

Every translator commit adds a snapshot and a few small files, so without care a table grows an
endless history and a scan opens thousands of tiny Parquet files. ``expire_snapshots`` drops old
snapshots (and the files only they used); ``rewrite_small_files`` packs a partition's small files into
few large ones in one snapshot that carries the progress summary forward unchanged. Both leave the
table as it was when another writer commits first: the next maintenance run tries again.
"""
from __future__ import annotations

import itertools
import logging
import math
import time
import uuid
from typing import Callable

from pybroker.iceberg.settings import PROGRESS_KEY, IcebergSettings

log = logging.getLogger(__name__)

HISTORY_WALK = 1000  # snapshots looked through for the newest progress summary
MAX_RETRIES_PROPERTY = "commit.retry.num-retries"
TARGET_SIZE_PROPERTY = "write.target-file-size-bytes"


def run_maintenance(table, settings: IcebergSettings) -> dict:
    """One maintenance pass over ``table``: expiry first (fewer manifests to read), then the rewrite."""
    expired = expire_snapshots(table, settings.snapshot_max_age_ms, settings.snapshots_to_keep)
    rewritten = rewrite_small_files(table, settings.small_file_bytes, settings.small_files_to_rewrite,
                                    settings.target_file_size_bytes)
    return {"expired": expired, "rewritten": rewritten}


# --- snapshot expiry ---------------------------------------------------------------------------------

def expire_snapshots(table, max_age_ms: int, keep: int, now_ms: int | None = None) -> int:
    """Expire the snapshots older than ``max_age_ms``, keeping the newest ``keep`` of every branch (main
    included), every branch or tag head and the newest snapshot carrying the progress summary. Files
    that only expired snapshots used (manifest lists, manifests, data files) are deleted afterwards
    (pyiceberg only edits the metadata). Returns how many snapshots were expired."""
    table.refresh()
    metadata = table.metadata
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    kept = _snapshots_to_keep(metadata, keep)
    expiring = [s for s in metadata.snapshots if s.timestamp_ms < now_ms - max_age_ms and s.snapshot_id not in kept]
    if not expiring:
        return 0
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in expiring]).commit()
    table.refresh()  # what remains now, including anything committed meanwhile
    _delete_unreferenced_files(table, expiring)
    log.info("table %s: expired %d snapshots", table.name(), len(expiring))
    return len(expiring)


def _snapshots_to_keep(metadata, keep: int) -> set[int]:
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.snapshots import ancestors_of
    kept: set[int] = set()
    for ref in metadata.refs.values():
        kept.add(ref.snapshot_id)  # heads are never expired (pyiceberg refuses too)
        if ref.snapshot_ref_type == SnapshotRefType.BRANCH:
            for i, snapshot in enumerate(ancestors_of(metadata.snapshot_by_id(ref.snapshot_id), metadata)):
                if i >= keep:
                    break
                kept.add(snapshot.snapshot_id)
    # Progress readers walk back from the head to the first summary with progress, and expiry cuts the
    # parent link of a removed snapshot's child: keep the whole way down to that summary.
    for snapshot in _walk_to_progress(metadata):
        kept.add(snapshot.snapshot_id)
    return kept


def _delete_unreferenced_files(table, expired) -> None:
    """Delete what the expired snapshots used and no remaining snapshot does. A data file stays while it
    is live (added or existing) in any remaining snapshot; a manifest while any remaining list names it."""
    io = table.io
    remaining_manifests = {m.manifest_path: m for s in table.metadata.snapshots for m in s.manifests(io)}
    expired_manifests = {m.manifest_path: m for s in expired for m in s.manifests(io)}
    orphan_manifests = [m for path, m in expired_manifests.items() if path not in remaining_manifests]
    candidates = {e.data_file.file_path for m in orphan_manifests
                  for e in m.fetch_manifest_entry(io, discard_deleted=False)}
    if candidates:
        live = {e.data_file.file_path for m in remaining_manifests.values()
                for e in m.fetch_manifest_entry(io, discard_deleted=True)}
        candidates -= live
    paths = sorted(candidates) + [m.manifest_path for m in orphan_manifests] + [s.manifest_list for s in expired]
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass  # an earlier run deleted it before stopping
        except OSError as e:  # the expiry itself is committed: a leftover file is only wasted space
            log.warning("table %s: cannot delete %s: %s", table.name(), path, e)


# --- small file rewrite ------------------------------------------------------------------------------

def rewrite_small_files(table, small_bytes: int, min_files: int, target_bytes: int,
                        before_commit: Callable[[], None] | None = None) -> int:
    """Replace, in every partition holding at least ``min_files`` data files below ``small_bytes``,
    those files by as few files as ``target_bytes`` allows, in one snapshot carrying the current
    progress summary. Returns how many files were replaced; 0 when nothing was worth it or the table
    changed before the commit (nothing is left behind; the next run tries again).
    ``before_commit``: called after the new files are written, before the commit (tests use it)."""
    from pyiceberg.exceptions import CommitFailedException
    table.refresh()
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0
    groups = _small_file_groups(table, snapshot.snapshot_id, small_bytes, max(min_files, 2), target_bytes)
    if not groups:
        return 0
    replaced, written = [], []
    try:
        write_uuid, counter = uuid.uuid4(), itertools.count(0)
        for tasks in groups:
            new_files = _rewrite_group(table, tasks, target_bytes, write_uuid, counter)
            if new_files is not None:
                replaced += [t.file for t in tasks]
                written += new_files
        if not replaced:
            return 0
        if before_commit is not None:
            before_commit()
        tx = _single_attempt_table(table).transaction()
        progress = _progress_text(table.metadata)
        properties = {PROGRESS_KEY: progress} if progress is not None else {}
        with tx.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
            for data_file in replaced:
                overwrite.delete_data_file(data_file)
            for data_file in written:
                overwrite.append_data_file(data_file)
    except BaseException:
        _delete_files(table, written)  # nothing was committed
        raise
    try:
        tx.commit_transaction()
    except CommitFailedException:
        log.info("table %s changed while its small files were rewritten: trying again next run", table.name())
        _delete_files(table, written)  # pyiceberg removed its own manifests; the data files are ours
        table.refresh()
        return 0
    table.refresh()
    log.info("table %s: %d small files rewritten into %d", table.name(), len(replaced), len(written))
    return len(replaced)


def _small_file_groups(table, snapshot_id: int, small_bytes: int, min_files: int, target_bytes: int) -> list[list]:
    """Scan tasks of the small data files of each partition (spec id and value) having at least
    ``min_files``, cut into runs of at most ``target_bytes`` on disk (one run in memory at a time)."""
    by_partition: dict = {}
    for task in table.scan(snapshot_id=snapshot_id).plan_files():
        data_file = task.file
        if data_file.file_size_in_bytes >= small_bytes or task.delete_files:  # rows under deletes stay put
            continue
        by_partition.setdefault((data_file.spec_id, data_file.partition), []).append(task)
    groups = []
    for tasks in by_partition.values():
        if len(tasks) < min_files:
            continue
        run, run_bytes = [], 0
        for task in tasks:
            if run and run_bytes + task.file.file_size_in_bytes > target_bytes:
                groups.append(run)
                run, run_bytes = [], 0
            run.append(task)
            run_bytes += task.file.file_size_in_bytes
        groups.append(run)
    return [run for run in groups if len(run) >= 2]  # one file alone gains nothing


def _rewrite_group(table, tasks, target_bytes: int, write_uuid, counter):
    """The group's rows (through the table's current schema) written as new data files, or None when
    that would not make fewer files."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
    metadata = table.metadata
    rows = ArrowScan(metadata, table.io, metadata.schema(), AlwaysTrue()).to_table(tasks)
    if rows.num_rows == 0:
        return None
    rows = _sorted_by_offset(rows)
    # pyiceberg packs by in-memory Arrow bytes: scale the on-disk target by this data's own ratio.
    on_disk = sum(t.file.file_size_in_bytes for t in tasks) or 1
    arrow_target = max(1, int(target_bytes * rows.nbytes / on_disk))
    if math.ceil(rows.nbytes / arrow_target) >= len(tasks):
        return None
    sized = metadata.model_copy(update={"properties": {**metadata.properties, TARGET_SIZE_PROPERTY: str(arrow_target)}})
    return list(_dataframe_to_data_files(sized, rows, table.io, write_uuid=write_uuid, counter=counter))


def _sorted_by_offset(rows):
    """Rows in (kafka.partition, kafka.offset) order when the table has the kafka column."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if "kafka" not in rows.column_names:
        return rows
    kafka = rows.column("kafka")
    if not {"partition", "offset"} <= {f.name for f in kafka.type}:
        return rows
    keys = pa.table({"p": pc.struct_field(kafka, "partition"), "o": pc.struct_field(kafka, "offset")})
    return rows.take(pc.sort_indices(keys, sort_keys=[("p", "ascending"), ("o", "ascending")]))


def _single_attempt_table(table):
    """The table as pyiceberg's commit sees it, with its own retries off: a retry would rebase the
    snapshot on a newer one but keep the older progress summary."""
    from pyiceberg.table import Table
    if table.metadata.properties.get(MAX_RETRIES_PROPERTY) == "0":
        return table
    metadata = table.metadata.model_copy(
        update={"properties": {**table.metadata.properties, MAX_RETRIES_PROPERTY: "0"}})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog, table.config)


def _delete_files(table, data_files) -> None:
    for data_file in data_files:
        try:
            table.io.delete(data_file.file_path)
        except OSError as e:
            log.warning("table %s: cannot delete unused file %s: %s", table.name(), data_file.file_path, e)


# --- progress summary --------------------------------------------------------------------------------

def _walk_to_progress(metadata) -> list:
    """Main's snapshots from the head back to the newest one whose summary has the progress ([] when
    none within HISTORY_WALK has: nothing to protect)."""
    walked = []
    snapshot = metadata.current_snapshot()
    while snapshot is not None and len(walked) < HISTORY_WALK:
        walked.append(snapshot)
        if snapshot.summary is not None and PROGRESS_KEY in snapshot.summary.additional_properties:
            return walked
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return []


def _progress_text(metadata) -> str | None:
    """The progress summary exactly as the newest snapshot having it wrote it."""
    walked = _walk_to_progress(metadata)
    return walked[-1].summary.additional_properties[PROGRESS_KEY] if walked else None
