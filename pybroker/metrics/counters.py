"""The broker's counters: plain ints bumped where requests are answered, rendered only on scrape.

Nothing here allocates per record or formats text on the request path: a produce costs one dict
lookup and a few integer additions per partition, a request's timing four ``perf_counter`` reads
and five bucket increments. All-topic totals are sums taken at scrape time, so the hot path never
counts twice. Counters only grow: a deleted topic's counts are folded into ``retired`` and keep
contributing to the totals.

Request timing (Kafka's RequestMetrics, per API): the dispatcher stamps a record when the frame is
handed over (t0), when the handler returns (local time ends), when an awaited handler finishes
(remote time: purgatory, long polls, acks=all) and the connection calls ``response_written`` once
the response's last byte is out (response send time, including any wait behind an earlier,
slower response on the same connection). Requests are handled as soon as their frame is complete
(no request queue, no handler threads), so RequestQueueTimeMs is always 0.
"""
import struct
from bisect import bisect_left
from time import perf_counter

_KEY_AND_VERSION = struct.Struct(">hh")

TIME_BUCKETS_MS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
SIZE_BUCKETS = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Histogram:
    """Fixed buckets (upper bounds, ``le``); counts kept per bucket, made cumulative on render."""
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self):
        """[(le, cumulative count)] ending with ('+Inf', total)."""
        out, running = [], 0
        for le, n in zip((*self.bounds, "+Inf"), self.counts):
            running += n
            out.append((le, running))
        return out


class TopicCounters:
    """Kafka's BrokerTopicMetrics for one topic (or the sum of all)."""
    __slots__ = ("messages_in", "bytes_in", "bytes_out", "failed_produce", "failed_fetch",
                 "produce_requests", "fetch_requests", "replication_bytes_out")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)

    def add(self, other: "TopicCounters") -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class ApiStats:
    """Kafka's RequestMetrics for one API: requests per version and the time histograms."""
    __slots__ = ("versions", "total", "local", "remote", "send", "size")

    def __init__(self):
        self.versions = {}
        self.total = Histogram(TIME_BUCKETS_MS)
        self.local = Histogram(TIME_BUCKETS_MS)
        self.remote = Histogram(TIME_BUCKETS_MS)
        self.send = Histogram(TIME_BUCKETS_MS)
        self.size = Histogram(SIZE_BUCKETS)


class BrokerMetrics:
    def __init__(self):
        self.topics: dict[str, TopicCounters] = {}
        self.retired = TopicCounters()  # deleted topics, still in the totals
        self.apis: dict[int, ApiStats] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.loop_lag = Histogram(LAG_BUCKETS_S)
        self.loop_lag_last = 0.0

    def topic(self, name: str) -> TopicCounters:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = TopicCounters()
        return t

    def totals(self) -> TopicCounters:
        out = TopicCounters()
        out.add(self.retired)
        for t in self.topics.values():
            out.add(t)
        return out

    def retire(self, name: str) -> None:
        t = self.topics.pop(name, None)
        if t is not None:
            self.retired.add(t)

    # ---- produce and fetch (called by the API modules) -----------------------------------

    def on_produce(self, topics, entries: dict, outcomes: dict, error: int) -> None:
        """``outcomes``: (topic, partition) -> (error, ProduceResult | None, message)."""
        topic = self.topic
        for t in topics:
            c = topic(t.name)
            for part in t.partitions:
                c.produce_requests += 1
                o = outcomes.get((t.name, part.index))
                if o is None or o[0]:
                    c.failed_produce += 1
                    continue
                result = o[1]
                if result is not None and not result.duplicate:  # a duplicate appends nothing
                    c.messages_in += result.last_offset - result.base_offset + 1
                    c.bytes_in += len(entries[(t.name, part.index)])

    def on_fetch(self, partitions, results, replica_id: int) -> None:
        """One consumer or follower Fetch: ``results`` in the order of ``partitions``."""
        topic = self.topic
        follower = replica_id >= 0
        for req, r in zip(partitions, results):
            c = topic(req.topic)
            c.fetch_requests += 1
            if r.error:
                c.failed_fetch += 1
            elif r.records is not None:
                if follower:
                    c.replication_bytes_out += r.records.length
                else:
                    c.bytes_out += r.records.length

    # ---- request timing (called by the dispatcher and the connection) ---------------------

    def handle(self, handle, frame, conn):
        """Run the dispatcher's ``handle(frame, conn)`` with its timing record queued on ``conn``."""
        t0 = perf_counter()
        key, version = _KEY_AND_VERSION.unpack_from(frame) if len(frame) >= 4 else (-1, -1)
        rec = [key, version, t0, t0, t0, len(frame)]
        conn.timings.append(rec)  # in request order, as the responses are written
        result = handle(frame, conn)
        rec[3] = rec[4] = perf_counter()
        if result is None or type(result) is list:
            return result
        return self._remote(result, rec)

    @staticmethod
    async def _remote(pending, rec):
        try:
            return await pending
        finally:
            rec[4] = perf_counter()

    def response_written(self, conn) -> None:
        """The connection wrote the last byte of its oldest response (or skipped a None one)."""
        if not conn.timings:
            return
        key, version, t0, t_local, t_ready, size = conn.timings.popleft()
        now = perf_counter()
        api = self.apis.get(key)
        if api is None:
            api = self.apis[key] = ApiStats()
        versions = api.versions
        versions[version] = versions.get(version, 0) + 1
        api.total.observe((now - t0) * 1000.0)
        api.local.observe((t_local - t0) * 1000.0)
        api.remote.observe((t_ready - t_local) * 1000.0)
        api.send.observe((now - t_ready) * 1000.0)
        api.size.observe(size)
