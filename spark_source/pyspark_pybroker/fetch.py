"""Executor side: read exactly the offsets [start, end) of one topic-partition as Arrow batches.

A task reads with pybroker's ``Consumer``: the partition is assigned manually (no group, no
commits), sought to ``start`` and drained with ``poll_batch``, whose Arrow rows are cut at
``end``. The consumer's loop thread keeps the next Fetch in flight while this task converts
and Spark ships the previous batch. Gaps (compaction, transaction markers) are passed by
following the consumer's position, so the read stops at ``end`` whatever lies between.
"""
import time

from pyspark_pybroker.metadata import report_data_loss
from pyspark_pybroker.options import OptionError, ReadOptions
from pyspark_pybroker.schema import arrow_schema, to_spark_batch

# Consumer settings (Kafka's names, kafka.* options) a read task honours; defaults for bulk reads.
READ_KEYS = {
    "isolation.level": (str, "read_uncommitted", ("read_uncommitted", "read_committed")),
    "fetch.min.bytes": (int, 1, 0),
    "fetch.max.wait.ms": (int, 500, 0),
    "fetch.max.bytes": (int, 64 << 20, 1),
    "max.partition.fetch.bytes": (int, 8 << 20, 1),  # larger than Kafka's 1 MiB: bulk reads
    "check.crcs": (bool, True),
}
# A task owns its partition's offsets: no group, nothing committed, and a position outside the
# log is reported (failOnDataLoss) rather than silently reset.
FIXED_SETTINGS = {"enable.auto.commit": False, "auto.offset.reset": "none",
                  "allow.auto.create.topics": False}
POLL_SLICE_MS = 100  # how often an idle read looks at its position (gaps move it without rows)
MAX_STALE_RANGE_ERRORS = 10  # out-of-range reports about prefetches while the position is valid


def read_config(opts: ReadOptions):
    """The read tasks' client settings, checked (an unknown or bad kafka.* option fails)."""
    from pybroker.client import config as client_config

    try:
        return client_config.parse(opts.client_config(), "consumer", READ_KEYS)
    except ValueError as exc:
        raise OptionError(f"bad kafka.* option for reading: {exc}") from None


def consumer_settings(opts: ReadOptions) -> dict:
    """Consumer properties of a read task: bulk-read defaults, the kafka.* options, fixed ones."""
    read_config(opts)
    bulk = {name: spec[1] for name, spec in READ_KEYS.items()}
    return {**bulk, **opts.client_config(), **FIXED_SETTINGS}


def open_consumer(opts: ReadOptions):
    from pybroker.client import Consumer

    try:
        return Consumer(consumer_settings(opts))
    except ValueError as exc:  # the client's ConfigError names the property
        raise OptionError(f"bad kafka.* option for reading: {exc}") from None


def _rows_before(batch, end: int) -> int:
    """How many leading rows of ``batch`` have offsets below ``end`` (offsets ascend)."""
    import pyarrow.compute as pc

    offsets = batch.column("offset")
    n = batch.num_rows
    if n == 0 or offsets[n - 1].as_py() < end:
        return n
    return int(pc.sum(pc.less(offsets, end)).as_py() or 0)


def _after_out_of_range(opts, consumer, tp, position: int, end: int):
    """Where to go on after the broker said a fetch offset is outside the log: the log start
    (records before it are lost), the same position (the report was about data fetched ahead),
    or None when the rest of the range is gone."""
    topic, partition = tp
    log_start = consumer.beginning_offsets([tp])[tp]
    if log_start > position:
        report_data_loss(opts, f"offsets {position} to {min(log_start, end) - 1} of "
                               f"{topic}-{partition} are no longer in the log (it now "
                               f"starts at {log_start})")
        return log_start
    log_end = consumer.end_offsets([tp])[tp]
    if position >= log_end:  # truncated: the records were removed from the log's end
        report_data_loss(opts, f"offsets {position} to {end - 1} of {topic}-{partition} "
                               f"are no longer in the log")
        return None
    return position


class FetchTimeoutError(TimeoutError):
    """A read made no progress within kafkaConsumer.pollTimeoutMs (broker slow or unreachable)."""


def _no_progress(opts, consumer, tp, position: int, end: int) -> int:
    """After ``kafkaConsumer.pollTimeoutMs`` without progress: report data loss when the log no
    longer holds the position and return the log start to go on from, else raise a timeout
    whatever failOnDataLoss says (the records may still be there)."""
    topic, partition = tp
    try:
        log_start = consumer.beginning_offsets([tp])[tp]
    except Exception as exc:  # noqa: BLE001 - the broker is unreachable: a timeout, not loss
        log_start = None
        cause = f" (looking up the log start failed too: {exc})"
    else:
        cause = ""
    if log_start is not None and log_start > position:
        report_data_loss(opts, f"offsets {position} to {min(log_start, end) - 1} of "
                               f"{topic}-{partition} are no longer in the log (it now "
                               f"starts at {log_start})")
        return log_start
    raise FetchTimeoutError(
        f"no records of {topic}-{partition} from offset {position} within "
        f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms} ms although the read ends at "
        f"{end}{cause}; the broker may be slow or unreachable (raise the option "
        f"'kafkaConsumer.pollTimeoutMs' to wait longer)")


def read_range(opts: ReadOptions, topic: str, partition: int, start: int, end: int):
    """Yield Arrow record batches of the source schema for offsets [start, end)."""
    if start >= end:
        return
    from pybroker.client import KafkaError, TopicPartition
    from pybroker.protocol.errors import ErrorCode

    schema = arrow_schema(opts.include_headers)
    tp = TopicPartition(topic, partition)
    idle_limit_s = opts.poll_timeout_ms / 1000.0
    consumer = open_consumer(opts)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        stale_errors = 0
        last_progress = time.monotonic()
        while position < end:
            try:
                batch = consumer.poll_batch(timeout_ms=POLL_SLICE_MS)
            except KafkaError as exc:
                if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                resume_at = _after_out_of_range(opts, consumer, tp, position, end)
                if resume_at is None:
                    return
                if resume_at == position:
                    stale_errors += 1
                    if stale_errors > MAX_STALE_RANGE_ERRORS:
                        raise
                consumer.seek(tp, resume_at)
                position = resume_at
                last_progress = time.monotonic()
                continue
            n = batch.num_rows
            if n:
                keep = _rows_before(batch, end)
                if keep:
                    yield to_spark_batch(batch if keep == n else batch.slice(0, keep), schema)
            now_at = consumer.position(tp)
            if now_at > position:
                position = now_at
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > idle_limit_s:
                position = _no_progress(opts, consumer, tp, position, end)
                consumer.seek(tp, position)
                last_progress = time.monotonic()
    finally:
        consumer.close(autocommit=False)
