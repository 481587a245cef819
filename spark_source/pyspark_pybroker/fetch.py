"""Executor side: read exactly the offsets [start, end) of one topic-partition as Arrow batches.

Fetches go straight to the partition leader on one blocking connection, the next Fetch sent
as soon as a response arrives (its offset read from the last batch header) so the broker works
while this task decodes and Spark ships the previous batch. Records are decoded natively into
Arrow columns and cut at ``end``; gaps (compaction, transaction markers) are passed by
following where the fetched batches end, so the read stops at ``end`` whatever lies between.
"""
import struct
import time

from pyspark_pybroker.metadata import report_data_loss
from pyspark_pybroker.options import OptionError, ReadOptions
from pyspark_pybroker.schema import arrow_schema, to_spark_batch

# Consumer settings (Kafka's names, kafka.* options) a read task honours.
READ_KEYS = {
    "isolation.level": (str, "read_uncommitted", ("read_uncommitted", "read_committed")),
    "fetch.min.bytes": (int, 1, 0),
    "fetch.max.wait.ms": (int, 500, 0),
    "fetch.max.bytes": (int, 64 << 20, 1),
    "max.partition.fetch.bytes": (int, 8 << 20, 1),  # larger than Kafka's 1 MiB: bulk reads
    "check.crcs": (bool, True),
}
MAX_LEADER_RETRIES = 10  # leader changes/unavailability tolerated by one task
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # base offset 8, length 4, leader epoch 4, magic 1, crc 4, attributes 2
_MIN_BATCH = 61  # a v2 batch header


def batches_end(buf) -> int:
    """One past the last offset of the complete batches in ``buf`` (-1 if none is complete):
    where the next Fetch starts, known before any record is decoded."""
    n, pos, following = len(buf), 0, -1
    while n - pos >= _MIN_BATCH:
        base, length = _BATCH_HEAD.unpack_from(buf, pos)
        if length < _MIN_BATCH - 12 or pos + 12 + length > n:
            break
        following = base + _LAST_DELTA.unpack_from(buf, pos + _LAST_DELTA_AT)[0] + 1
        pos += 12 + length
    return following


def read_config(opts: ReadOptions):
    """The read tasks' client settings, checked (an unknown or bad kafka.* option fails)."""
    from pybroker.client import config as client_config

    try:
        return client_config.parse(opts.client_config(), "consumer", READ_KEYS)
    except ValueError as exc:
        raise OptionError(f"bad kafka.* option for reading: {exc}") from None


def _log_start(opts: ReadOptions, topic: str, partition: int) -> int:
    from pyspark_pybroker.metadata import OffsetLookup

    with OffsetLookup(opts) as lookup:
        return lookup.earliest([(topic, partition)])[(topic, partition)]


def _rows_before(batch, end: int) -> int:
    """How many leading rows of ``batch`` have offsets below ``end`` (offsets ascend)."""
    import pyarrow.compute as pc

    offsets = batch.column("offset")
    n = batch.num_rows
    if n == 0 or offsets[n - 1].as_py() < end:
        return n
    return int(pc.sum(pc.less(offsets, end)).as_py() or 0)


class _PartitionReader:
    """Fetches of one topic-partition from its leader, one request kept ahead."""

    def __init__(self, opts: ReadOptions, topic: str, partition: int):
        from pybroker.protocol import REQUESTS

        self.opts = opts
        self.topic = topic
        self.partition = partition
        self.cfg = read_config(opts)
        self.read_committed = self.cfg["isolation.level"] == "read_committed"
        self.timeout_s = self.cfg.seconds("request.timeout.ms") + self.cfg.seconds("fetch.max.wait.ms")
        self._api = REQUESTS[1]
        self.link = None
        self.sent_offset = None  # the offset of the Fetch in flight

    def connect(self) -> None:
        from pyspark_pybroker.wire import BrokerLink, find_leader

        self.close()
        host, port = find_leader(self.cfg.bootstrap, self.topic, self.partition, self.cfg.client_id,
                                 self.timeout_s)
        self.link = BrokerLink(host, port, self.cfg.client_id, self.timeout_s,
                               self.cfg["receive.message.max.bytes"])

    def send(self, offset: int) -> None:
        api = self._api
        cfg = self.cfg
        req = api(replica_id=-1, max_wait_ms=cfg["fetch.max.wait.ms"], min_bytes=cfg["fetch.min.bytes"],
                  max_bytes=cfg["fetch.max.bytes"], isolation_level=1 if self.read_committed else 0,
                  session_id=0, session_epoch=-1,
                  topics=[api.FetchTopic(topic=self.topic, partitions=[api.FetchPartition(
                      partition=self.partition, current_leader_epoch=-1, fetch_offset=offset,
                      log_start_offset=-1, partition_max_bytes=cfg["max.partition.fetch.bytes"])])],
                  forgotten_topics_data=[], rack_id="")
        self.link.send(req)
        self.sent_offset = offset

    def receive(self):
        """The partition's data in the response to the Fetch in flight."""
        from pybroker.client.errors import error_for

        self.sent_offset = None
        resp = self.link.receive(reuse=True)  # the previous response is fully decoded by now
        if resp.error_code:
            raise error_for(resp.error_code, f"fetching {self.topic}-{self.partition}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == self.partition:
                    return p
        raise error_for(3, f"the fetch response has no {self.topic}-{self.partition}")

    def close(self) -> None:
        link, self.link, self.sent_offset = self.link, None, None
        if link is not None:
            link.close()


def read_range(opts: ReadOptions, topic: str, partition: int, start: int, end: int):
    """Yield Arrow record batches of the source schema for offsets [start, end)."""
    if start >= end:
        return
    from pybroker import core
    from pybroker.client import arrow
    from pybroker.client.errors import KafkaError, error_for
    from pybroker.protocol.errors import ErrorCode

    retry_codes = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                   ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REQUEST_TIMED_OUT,
                   ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.OFFSET_NOT_AVAILABLE}
    decode_columns = core.client_codec.decode_columns
    schema = arrow_schema(opts.include_headers)
    reader = _PartitionReader(opts, topic, partition)
    check_crcs = reader.cfg["check.crcs"]
    idle_limit_s = opts.poll_timeout_ms / 1000.0
    backoff_s = reader.cfg.seconds("retry.backoff.ms")
    position = start
    retries = 0
    last_progress = time.monotonic()
    try:
        reader.connect()
        while position < end:
            if reader.sent_offset is None:
                reader.send(position)
            try:
                data = reader.receive()
            except KafkaError as exc:
                if not exc.retriable or retries >= MAX_LEADER_RETRIES:
                    raise
                retries += 1
                time.sleep(backoff_s)
                reader.connect()
                continue
            code = data.error_code
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                log_start = _log_start(opts, topic, partition)
                if log_start <= position:  # past the log end: the records were truncated away
                    report_data_loss(opts, f"offsets {position} to {end - 1} of {topic}-{partition} "
                                           f"are no longer in the log")
                    return
                report_data_loss(opts, f"offsets {position} to {min(log_start, end) - 1} of "
                                       f"{topic}-{partition} are no longer in the log (it now "
                                       f"starts at {log_start})")
                position = log_start
                continue
            if code in retry_codes:
                if retries >= MAX_LEADER_RETRIES:
                    raise error_for(code, f"fetching {topic}-{partition}")
                retries += 1
                time.sleep(backoff_s)
                reader.connect()
                continue
            if code:
                raise error_for(code, f"fetching {topic}-{partition}")
            records = data.records
            following = batches_end(records) if records is not None and len(records) else -1
            if position < following < end:
                reader.send(following)  # the broker prepares the next data meanwhile
            if following > position:
                aborted = None
                if reader.read_committed and data.aborted_transactions:
                    aborted = [(a.producer_id, a.first_offset) for a in data.aborted_transactions]
                cols = decode_columns(records, position, reader.read_committed, aborted, check_crcs)
                if cols.count:
                    batch = arrow.to_record_batch(cols, topic, partition)
                    keep = _rows_before(batch, end)
                    if keep:
                        yield to_spark_batch(batch if keep == batch.num_rows else batch.slice(0, keep),
                                             schema)
                position = max(position, cols.next_offset, following)
                last_progress = time.monotonic()
                retries = 0
            elif time.monotonic() - last_progress > idle_limit_s:
                report_data_loss(opts, f"no records of {topic}-{partition} from offset {position} "
                                       f"within kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms} "
                                       f"although the read ends at {end} (the log ends at "
                                       f"{data.high_watermark})")
                return
    finally:
        reader.close()
