"""``pybroker produce`` and ``pybroker consume``: Kafka's console producer and consumer.

The producer turns stdin lines into record batches (partition: given, else murmur2 of the key
as the Java client does, else round-robin per batch). The consumer fetches by manual
assignment and, unless it starts at the latest offset, stops at the high watermarks it saw
at start.
"""
import random
import struct
import sys
import time

from pybroker import compression
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.records import CONTROL, TIMESTAMP_LOG_APPEND, Record, build_batch, decode_records
from pybroker.tools.wire import (FETCH, LIST_OFFSETS, PRODUCE, RETRIABLE, Client, KafkaError,
                                 ToolError, split_batches)

MAX_BATCH_BYTES = 1_000_000  # stay under Kafka's default message.max.bytes (1048588)
RECORD_OVERHEAD = 16  # rough per-record framing (varints, attributes) for the size estimate
ATTEMPTS = 5
EARLIEST, LATEST = -2, -1
_BATCH_HEAD = struct.Struct(">qiibIhi")  # base offset .. last offset delta


def run(args) -> int:
    return produce(args) if args.console == "produce" else consume(args)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2 in the Java client), as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    n = len(data)
    h = 0x9747B28C ^ n
    whole = n & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = n - whole
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The Java client's default partition of a keyed record: toPositive(murmur2(key)) % n."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _flag(props: dict, name: str, default: bool = False) -> bool:
    value = props.get(name)
    return default if value is None else value.strip().lower() == "true"


def _unescape(text: str) -> bytes:
    """Separators given on a command line, with \\t and \\n spelled out, as bytes."""
    return text.encode("utf-8").decode("unicode_escape").encode("utf-8")


def _leaders(meta) -> dict[int, int]:
    return {p.partition_index: p.leader_id for p in meta.partitions}


# --- produce -----------------------------------------------------------------------------------

class _Sender:
    """Sends batches to partition leaders, refreshing metadata after retriable errors."""

    def __init__(self, client: Client, topic: str, meta, acks: int, codec: int, timeout_ms: int):
        self.client, self.topic, self.acks, self.codec, self.timeout_ms = client, topic, acks, codec, timeout_ms
        self.leaders = _leaders(meta)

    def send(self, pending: dict[int, list[Record]]) -> None:
        now = int(time.time() * 1000)
        batches = {p: build_batch(recs, base_timestamp=now, attributes=self.codec)
                   for p, recs in pending.items() if recs}
        api = REQUESTS[PRODUCE]
        for attempt in range(ATTEMPTS):
            by_leader: dict[int, list[int]] = {}
            for p in batches:
                by_leader.setdefault(self.leaders.get(p, -1), []).append(p)
            failed: dict[int, KafkaError] = {}
            for leader, parts in by_leader.items():
                conn = self.client.node_conn(leader)
                req = api(transactional_id=None, acks=self.acks, timeout_ms=self.timeout_ms, topic_data=[
                    api.TopicProduceData(name=self.topic, partition_data=[
                        api.PartitionProduceData(index=p, records=batches[p]) for p in parts])])
                resp = conn.request(req, expect_response=self.acks != 0)
                if resp is None:  # acks=0: the broker does not answer
                    continue
                for t in resp.responses:
                    for r in t.partition_responses:
                        if r.error_code:
                            failed[r.index] = KafkaError(r.error_code, r.error_message,
                                                         f"cannot produce to {self.topic}-{r.index}")
                        else:
                            batches.pop(r.index, None)
            for p, err in failed.items():
                if err.code not in RETRIABLE or attempt + 1 == ATTEMPTS:
                    raise err
            if not batches:
                return
            time.sleep(0.1 * (attempt + 1))  # let a leader election finish
            self.leaders = _leaders(self.client.topic_metadata(self.topic))
        raise ToolError(f"records for partitions {sorted(batches)} of {self.topic} were not acknowledged")


def produce(args) -> int:
    props = dict(args.property)
    parse_key = _flag(props, "parse.key")
    separator = _unescape(props.get("key.separator", "\t"))
    if parse_key and not separator:
        raise ToolError("key.separator must not be empty")
    ignore_error = _flag(props, "ignore.error")
    acks = -1 if args.acks in ("-1", "all") else int(args.acks)
    codec = {name: code for code, name in compression.NAMES.items()}[args.compression_codec]
    batch_size = max(1, args.batch_size)
    with Client(args.bootstrap_server, args.request_timeout_ms) as client:
        meta = client.topic_metadata(args.topic, auto_create=True)
        count = len(meta.partitions)
        if args.partition is not None and not 0 <= args.partition < count:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {args.topic} has partitions 0-{count - 1}", f"partition {args.partition}")
        sender = _Sender(client, args.topic, meta, acks, codec, args.request_timeout_ms)
        pending: dict[int, list[Record]] = {}
        sizes: dict[int, int] = {}
        sticky = random.randrange(count)  # keyless records: one partition per batch, then the next
        for lineno, line in enumerate(sys.stdin.buffer, 1):
            line = line[:-1] if line.endswith(b"\n") else line
            line = line[:-1] if line.endswith(b"\r") else line
            key = None
            if parse_key:
                at = line.find(separator)
                if at < 0:
                    if not ignore_error:
                        raise ToolError(f"no key separator {separator.decode()!r} on line {lineno}: "
                                        f"{line[:80].decode('utf-8', 'replace')!r}")
                    key = None
                else:
                    key, line = line[:at], line[at + len(separator):]
            if args.partition is not None:
                p = args.partition
            elif key is not None:
                p = partition_for_key(key, count)
            else:
                p = sticky
            pending.setdefault(p, []).append(Record(value=line, key=key))
            sizes[p] = sizes.get(p, 0) + len(line) + len(key or b"") + RECORD_OVERHEAD
            if len(pending[p]) >= batch_size or sizes[p] >= MAX_BATCH_BYTES:
                sender.send({p: pending.pop(p)})
                sizes.pop(p)
                if p == sticky and key is None and args.partition is None:
                    sticky = (sticky + 1) % count
        if pending:
            sender.send(pending)
    return 0


# --- consume -----------------------------------------------------------------------------------

def list_offsets(client: Client, topic: str, leaders: dict[int, int], parts, timestamp: int) -> dict[int, int]:
    """The earliest (-2) or latest (-1, the high watermark) offset of each partition."""
    api = REQUESTS[LIST_OFFSETS]
    by_leader: dict[int, list[int]] = {}
    for p in parts:
        by_leader.setdefault(leaders[p], []).append(p)
    out = {}
    for leader, ps in by_leader.items():
        req = api(replica_id=-1, isolation_level=0, topics=[api.ListOffsetsTopic(name=topic, partitions=[
            api.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
            for p in ps])])
        resp = client.node_conn(leader).request(req)
        for t in resp.topics:
            for r in t.partitions:
                if r.error_code:
                    raise KafkaError(r.error_code, None, f"cannot list offsets of {topic}-{r.partition_index}")
                out[r.partition_index] = r.offset
    missing = set(parts) - set(out)
    if missing:
        raise ToolError(f"the broker returned no offsets for partitions {sorted(missing)} of {topic}")
    return out


class _Printer:
    """Kafka's DefaultMessageFormatter: optional timestamp, partition, offset, headers, key."""

    def __init__(self, props: dict):
        self.ts = _flag(props, "print.timestamp")
        self.partition = _flag(props, "print.partition")
        self.offset = _flag(props, "print.offset")
        self.headers = _flag(props, "print.headers")
        self.key = _flag(props, "print.key")
        self.value = _flag(props, "print.value", True)
        self.sep = _unescape(props.get("key.separator", "\t"))
        self.eol = _unescape(props.get("line.separator", "\n"))
        self.out = sys.stdout.buffer

    def write(self, partition: int, rec, log_append: bool) -> None:
        fields = []
        if self.ts:
            fields.append(f"{'LogAppendTime' if log_append else 'CreateTime'}:{rec.timestamp}".encode())
        if self.partition:
            fields.append(b"Partition:%d" % partition)
        if self.offset:
            fields.append(b"Offset:%d" % rec.offset)
        if self.headers:
            fields.append(b",".join(k.encode() + b":" + (b"null" if v is None else v) for k, v in rec.headers)
                          or b"NO_HEADERS")
        if self.key:
            fields.append(b"null" if rec.key is None else rec.key)
        if self.value:
            fields.append(b"null" if rec.value is None else rec.value)
        self.out.write(self.sep.join(fields) + self.eol)


def consume(args) -> int:
    printer = _Printer(dict(args.property))
    if args.max_messages is not None and args.max_messages <= 0:
        return 0
    start = EARLIEST if args.from_beginning else LATEST
    if args.offset is not None:
        word = args.offset.strip().lower()
        if word in ("earliest", "latest"):
            start = EARLIEST if word == "earliest" else LATEST
        elif word.isdigit():
            start = int(word)
        else:
            raise ToolError(f"--offset must be a non-negative number, 'earliest' or 'latest', not {args.offset!r}")
    bounded = start != LATEST  # read up to the end seen at start, then exit
    timeout_ms = args.timeout_ms if args.timeout_ms is not None else (30000 if bounded else None)
    topic = args.topic
    with Client(args.bootstrap_server, args.request_timeout_ms) as client:
        meta = client.topic_metadata(topic)
        leaders = _leaders(meta)
        parts = sorted(leaders)
        if args.partition is not None:
            if args.partition not in leaders:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"topic {topic} has partitions 0-{len(parts) - 1}", f"partition {args.partition}")
            parts = [args.partition]
        ends = list_offsets(client, topic, leaders, parts, LATEST)
        positions = dict(ends) if start == LATEST else (
            list_offsets(client, topic, leaders, parts, EARLIEST) if start == EARLIEST
            else {p: start for p in parts})
        active = {p for p in parts if not bounded or positions[p] < ends[p]}
        max_bytes = {p: 1 << 20 for p in parts}
        printed, last_progress = 0, time.monotonic()
        api = REQUESTS[FETCH]
        while active and (args.max_messages is None or printed < args.max_messages):
            progressed = False
            by_leader: dict[int, list[int]] = {}
            for p in sorted(active):
                by_leader.setdefault(leaders.get(p, -1), []).append(p)
            refresh = False
            for leader, ps in by_leader.items():
                req = api(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                          session_id=0, session_epoch=-1, topics=[api.FetchTopic(topic=topic, partitions=[
                              api.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=positions[p],
                                                 last_fetched_epoch=-1, log_start_offset=-1,
                                                 partition_max_bytes=max_bytes[p]) for p in ps])],
                          forgotten_topics_data=[], rack_id="")
                resp = client.node_conn(leader).request(req)
                if resp.error_code:
                    raise KafkaError(resp.error_code, None, f"cannot fetch from {topic}")
                for t in resp.responses:
                    for data in t.partitions:
                        p = data.partition_index
                        if p not in active:
                            continue
                        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                            positions[p] = _reset(client, topic, leaders, p, positions[p])
                            progressed = True
                        elif data.error_code in RETRIABLE:
                            refresh = True
                        elif data.error_code:
                            raise KafkaError(data.error_code, None, f"cannot fetch from {topic}-{p}")
                        else:
                            before = positions[p]
                            printed = _print_records(printer, data, p, positions, ends[p] if bounded else None,
                                                     printed, args.max_messages, max_bytes)
                            progressed |= positions[p] != before
                        if bounded and positions[p] >= ends[p]:
                            active.discard(p)
                        if args.max_messages is not None and printed >= args.max_messages:
                            break
            printer.out.flush()
            now = time.monotonic()
            if progressed:
                last_progress = now
            elif timeout_ms is not None and (now - last_progress) * 1000 >= timeout_ms:
                if bounded and active:
                    print(f"Processed a total of {printed} messages", file=sys.stderr)
                    raise ToolError(f"no new records for {timeout_ms} ms before reaching the end offsets of "
                                    f"partitions {sorted(active)}")
                break
            if refresh:
                time.sleep(0.2)
                leaders = _leaders(client.topic_metadata(topic))
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def _reset(client: Client, topic: str, leaders, p: int, position: int) -> int:
    """After OFFSET_OUT_OF_RANGE: the log start if we were below it, else the log end."""
    earliest = list_offsets(client, topic, leaders, [p], EARLIEST)[p]
    new = earliest if position < earliest else list_offsets(client, topic, leaders, [p], LATEST)[p]
    print(f"offset {position} is out of range for {topic}-{p}; resetting to {new}", file=sys.stderr)
    return new


def _print_records(printer: _Printer, data, p: int, positions: dict, end: int | None,
                   printed: int, limit: int | None, max_bytes: dict) -> int:
    records = data.records
    batches = split_batches(records)
    if not batches and records is not None and len(records) and positions[p] < data.high_watermark:
        max_bytes[p] = min(max_bytes[p] * 2, 1 << 30)  # a batch larger than we asked for: ask for more
        return printed
    for batch in batches:
        base, _, _, magic, _, attributes, last_delta = _BATCH_HEAD.unpack_from(batch, 0)
        last = base + last_delta
        if magic != 2:
            raise ToolError(f"{len(batch)}-byte message set with magic {magic} at offset {base} of partition "
                            f"{p}: only record batches (magic 2) are supported")
        if last < positions[p]:
            continue
        if not attributes & CONTROL:  # transaction markers are not records to print
            for rec in decode_records(batch):
                if rec.offset < positions[p]:
                    continue
                if end is not None and rec.offset >= end:
                    positions[p] = max(positions[p], rec.offset)  # reached the end seen at start
                    return printed
                if limit is not None and printed >= limit:
                    return printed
                printer.write(p, rec, bool(attributes & TIMESTAMP_LOG_APPEND))
                printed += 1
                positions[p] = rec.offset + 1
        positions[p] = max(positions[p], last + 1)  # skip compacted-away offsets and markers
    return printed
