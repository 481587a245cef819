"""Checking and normalising one record's arguments where the native append path refuses them, and
the errors the producer raises to its caller before a record is accepted."""
from pybroker.client import partitioner as partitioners
from pybroker.client.errors import BufferFullError, KafkaError
from pybroker.protocol.errors import ErrorCode


def record_size(value, key) -> int:
    """Bytes of a record's key and value (str counted by characters, as the native path does)."""
    n = 0
    for x in (value, key):
        if x is not None:
            n += len(x) if isinstance(x, (bytes, str)) else memoryview(x).nbytes
    return n


def closed_error() -> KafkaError:
    return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed", retriable=False,
                      name="PRODUCER_CLOSED")


def buffer_full_error(engine) -> BufferFullError:
    return BufferFullError(
        f"the producer buffer ({engine.cfg['buffer.memory']} bytes of buffer.memory, "
        f"{engine.appender.buffered} in use) stayed full for max.block.ms ({engine.max_block_ms} ms); "
        "the broker is not keeping up or is unreachable, or records are produced faster than they can be sent")


def normalize(engine, st, topic, value, key, partition, headers):
    """Fix what the native path refused with ST_NEEDS_PYTHON / ST_TOO_LARGE / ST_CLOSED: returns
    (value, key, partition, headers) to try again, or raises."""
    fast = engine.fast
    if st == fast.ST_TOO_LARGE:
        size = record_size(value, key)
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                         f"the record is {size} bytes, larger than max.request.size "
                         f"({engine.cfg['max.request.size']}) or buffer.memory ({engine.cfg['buffer.memory']})",
                         retriable=False)
    if st == fast.ST_CLOSED:
        raise closed_error()
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"topic must be a non-empty str, not {topic!r}")
    headers = normalize_headers(headers)
    if partition is None:
        partition = -1
    elif not isinstance(partition, int) or isinstance(partition, bool):
        try:
            partition = int(partition.__index__())
        except (AttributeError, TypeError):
            raise TypeError(f"partition must be an int, not {type(partition).__name__}") from None
    if partition < -1:
        raise ValueError(f"partition must be >= 0 (or -1 for the partitioner's choice), not {partition}")
    if partition == -1 and key is not None and engine.mode == fast.MODE_PYTHON:
        ts = engine.appender.topic(topic)
        if ts is not None and ts.ready:
            k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
            partition = partitioners.python_partition(engine.partitioner, k, ts.num_partitions)
    return value, key, partition, headers


def normalize_error(engine, st) -> KafkaError:
    """The error ``normalize`` raises for a status that no argument fix can cure."""
    try:
        normalize(engine, st, "x", None, None, -1, None)
    except KafkaError as exc:
        return exc
    return KafkaError(-1, f"records could not be appended (status {st})", retriable=False)


def normalize_headers(headers):
    """A list of (str|bytes, bytes|None) tuples from a list of pairs or a dict (str values encoded)."""
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    out = []
    for h in items:
        h = tuple(h)
        if len(h) != 2:
            raise ValueError(f"a header must be a (key, value) pair, not {h!r}")
        k, v = h
        if not isinstance(k, (str, bytes)):
            raise TypeError(f"a header key must be str or bytes, not {type(k).__name__}")
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif v is not None and not isinstance(v, bytes):
            v = bytes(memoryview(v))
        out.append((k, v))
    return out


def key_partition(engine, topic, key) -> int:
    """The partition a keyed (or keyless: sticky) record would go to now, for error reports."""
    ts = engine.appender.topic(topic)
    if key is None or ts is None or ts.num_partitions <= 0:
        return ts.sticky if ts is not None else -1
    if isinstance(key, str):
        key = key.encode("utf-8")
    return engine.fast.partition_for_key(key, ts.num_partitions)
