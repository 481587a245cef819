"""Bulk input for ``produce_batch``: lists, pyarrow Arrays/ChunkedArrays and pandas Series turned
into what the native batch builder appends without a Python call per record (lists of bytes or
raw Arrow buffers), keyed rows grouped per partition first."""
import array

from pybroker.client import partitioner as partitioners
from pybroker.client.producer_delivery import BulkHandle
from pybroker.client.producer_input import normalize_error, normalize_headers


def _bytes_list(items, what):
    """``items`` with str entries UTF-8 encoded; TypeError for entries that are not bytes-like."""
    kinds = set(map(type, items))  # a C-level pass, no Python call per entry
    if kinds <= {bytes, type(None)}:
        return items
    if kinds <= {bytes, type(None), bytearray, memoryview, str}:
        return [v.encode("utf-8") if type(v) is str else v for v in items] if str in kinds else items
    bad = next(k for k in kinds if k not in (bytes, type(None), bytearray, memoryview, str))
    raise TypeError(f"{what} entries must be bytes, str or None, not {bad.__name__}")


def _is_arrow(x) -> bool:
    return type(x).__module__.startswith("pyarrow")


def _to_arrow_or_list(x, what):
    """A list, or a pyarrow Array (binary family) for Arrow/pandas/NumPy input."""
    if x is None:
        return None
    if isinstance(x, list):
        return x
    if isinstance(x, tuple):
        return list(x)
    mod = type(x).__module__
    import pyarrow as pa
    if mod.startswith("pandas"):
        x = pa.Array.from_pandas(x)
    elif mod.startswith("numpy"):
        x = pa.array(x)
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks() if x.num_chunks != 1 else x.chunk(0)
    if isinstance(x, pa.Array):
        t = x.type
        if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or \
                pa.types.is_large_string(t):
            return x
        if pa.types.is_null(t):
            return x.cast(pa.binary())
        if pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t) or pa.types.is_string_view(t):
            return x.cast(pa.binary())
        raise TypeError(f"{what} must be binary or string data, not Arrow type {t}")
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"{what} must be a list, a pyarrow Array/ChunkedArray or a pandas Series, "
                        f"not {type(x).__name__}") from None


def _arrow_buffers(values, keys):
    """(key_validity, key_offsets, key_data, value_validity, value_offsets, value_data, wide, offset)
    for append_arrow, with both arrays made the same width and offset."""
    import pyarrow as pa
    wide = _has_64bit_offsets(values)
    if keys is not None:
        kwide = _has_64bit_offsets(keys)
        if kwide != wide:
            if wide:
                keys = keys.cast(pa.large_binary())
            else:
                values = values.cast(pa.large_binary())
                wide = True
        if keys.offset != values.offset:
            keys, values = _unoffset(keys), _unoffset(values)
    vb = values.buffers()
    if keys is None:
        kb = (None, None, None)
    else:
        kb = keys.buffers()
    return (kb[0], kb[1], kb[2], vb[0], vb[1], vb[2], wide, values.offset)


def _has_64bit_offsets(arr) -> bool:
    import pyarrow as pa
    return pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)


def _unoffset(arr):
    import pyarrow as pa
    return pa.concat_arrays([arr]) if arr.offset else arr


class BulkJob:
    """One produce_batch call: its rows split into (partition, keys, values) groups, appended
    group by group as buffer space allows. ``settle(results, error)`` runs once every appended
    run is delivered or failed."""

    def __init__(self, engine, topic, values, keys, partition, timestamp, headers, settle):
        self.engine = engine
        self.topic = topic
        self.handle = BulkHandle(settle)
        self.partition = partition
        self.timestamp = engine.fast.wall_ms() if timestamp is None else int(timestamp)
        self.headers = normalize_headers(headers)
        self.values = _to_arrow_or_list(values, "values")
        self.keys = _to_arrow_or_list(keys, "keys")
        if isinstance(self.values, list):
            self.values = _bytes_list(self.values, "values")
        if isinstance(self.keys, list):
            self.keys = _bytes_list(self.keys, "keys")
        if self.values is None:
            raise TypeError("values must not be None")
        self.arrow = _is_arrow(self.values) or _is_arrow(self.keys)
        if self.arrow:
            import pyarrow as pa
            if not _is_arrow(self.values):
                self.values = pa.array(self.values, pa.binary())
            if self.keys is not None and not _is_arrow(self.keys):
                self.keys = pa.array(self.keys, pa.binary())
            if self.headers is not None:  # the per-record header path works on lists
                self.values = self.values.to_pylist()
                self.keys = None if self.keys is None else self.keys.to_pylist()
                self.arrow = False
        if self.keys is not None and len(self.keys) != len(self.values):
            raise ValueError(f"keys has {len(self.keys)} entries, values {len(self.values)}")
        if partition is None:
            self.partition = -1
        if self.partition < -1:
            raise ValueError(f"partition must be >= 0 or -1, not {self.partition}")
        self.groups = None  # [(partition, keys, values, arrow buffers or None, next row, stop)]
        self.chunks = 0
        self.count = len(self.values)

    def plan(self, num_partitions: int) -> None:
        """Split rows by partition (needs the topic's partition count for keyed rows)."""
        fast = self.engine.fast
        keyed = self.keys is not None and self.partition < 0 and self.engine.mode != fast.MODE_IGNORE_KEY
        if not keyed:
            self.groups = [self._group(self.partition, self.keys, self.values)]
            return
        if self.arrow:
            self.groups = self._plan_arrow(num_partitions)
        else:
            if self.engine.mode == fast.MODE_MURMUR2:
                parts = fast.partitions_for_keys(self.keys, num_partitions)
            else:  # a Python partitioner: one call per keyed record
                parts = array.array("i", [-1 if k is None else partitioners.python_partition(
                    self.engine.partitioner, k.encode() if isinstance(k, str) else bytes(k), num_partitions)
                    for k in self.keys]).tobytes()
            groups = fast.split_by_partition(parts, self.keys, self.values)
            self.groups = [self._group(p, ks, vs) for p, (ks, vs) in sorted(groups.items())]

    def _plan_arrow(self, num_partitions):
        import numpy as np
        import pyarrow as pa
        fast = self.engine.fast
        keys, values = self.keys, self.values
        kb = keys.buffers()
        kwide = _has_64bit_offsets(keys)
        if self.engine.mode == fast.MODE_MURMUR2:
            raw = fast.partitions_for_arrow_keys(kb[0], kb[1], kb[2], kwide, keys.offset, len(keys), num_partitions)
            parts = np.frombuffer(raw, dtype=np.int32)
        else:
            parts = np.array([-1 if k is None else partitioners.python_partition(self.engine.partitioner, k,
                                                                                 num_partitions)
                              for k in keys.cast(pa.binary()).to_pylist()], dtype=np.int32)
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        idx = pa.array(order)
        keys, values = keys.take(idx), values.take(idx)
        cuts = np.flatnonzero(np.diff(sorted_parts)) + 1
        starts = np.concatenate(([0], cuts)).astype(np.int64)
        stops = np.concatenate((cuts, [len(parts)])).astype(np.int64)
        groups = []
        for a, z in zip(starts.tolist(), stops.tolist()):
            if z > a:
                groups.append(self._group(int(sorted_parts[a]), keys.slice(a, z - a), values.slice(a, z - a)))
        return groups

    def _group(self, partition, keys, values):
        if self.arrow:
            bufs = _arrow_buffers(values, keys)
            return [partition, None, None, bufs, 0, len(values)]
        return [partition, keys, values, None, 0, len(values)]

    def fail(self, st, partition) -> None:
        """Record why appending stopped for good (``st`` from ``advance``)."""
        eng = self.engine
        self.handle.fail(eng.partition_error(self.topic, partition) if st == eng.fast.ST_PARTITION_FAILED
                         else normalize_error(eng, st))

    def seal(self) -> None:
        """No more rows will be appended: the handle settles once every appended run is done."""
        self.handle.seal(self.chunks)

    def advance(self):
        """Append as much as fits; ST_OK when every row is in, else the status that stopped it
        (the job can be advanced again later)."""
        fast = self.engine.fast
        app = self.engine.appender
        for g in self.groups:
            partition, keys, values, bufs, pos, stop = g
            while pos < stop:
                with app.lock:
                    pos, self.chunks, st = app.append_bulk(self.topic, partition, keys, values, self.headers,
                                                           self.timestamp, pos, stop, self.handle, self.chunks, bufs)
                g[4] = pos
                if st != fast.ST_OK:
                    return st, partition
        return fast.ST_OK, -1

