"""Batches between the appender and the wire: which to send next, sequence numbers, retries, expiry.

The appender (``producer_fast``) holds the open and sealed batches users fill. This module, used
only on the event-loop thread, takes sealed batches out of it for a broker's next Produce
request (one batch per partition per request, as Kafka requires), builds them, and keeps each
partition's idempotence state:

- ``next_seq``: the base sequence of the next new batch; ``acked_next``: the sequence the broker
  expects after the last acknowledged batch.
- ``inflight``: batches sent and not answered, oldest first. With idempotence at most 5 per
  partition (the broker remembers the last 5 batches per producer for deduplication), and only
  one until the broker has acknowledged a batch of the partition under the current producer id
  and epoch (``confirmed``): a broker without state for the producer accepts any sequence, so a
  later batch pipelined behind a first batch that is refused without being written (say
  NOT_LEADER_OR_FOLLOWER from a partition that was just created) would be written ahead of it,
  and the first batch's retry would then be refused as out of order.
- ``retry``: batches to send again, oldest first. A retried batch is resent with its original
  bytes (same producer id, epoch and sequence) so the broker answers a batch it already wrote
  with that batch's offsets instead of writing it twice. While a partition has batches to retry
  nothing new is sent for it and the retries go out one at a time, each after the previous
  answer, so they land in order.
- A partition's next batch may be pipelined behind its in-flight ones only on the connection
  those went out on (one TCP connection keeps them in order). Once that connection is lost,
  nothing more is sent for the partition until every batch in flight on it has failed and
  been queued for retry: a newer batch sent on a new connection first could be written ahead
  of an older one the broker never got (or, if it did, push it out of the five batches the
  broker remembers, so its retry is refused as out of order).
- ``gap``: a batch failed for good with an error that proves the broker did not write it (a
  rejection in a response), leaving a hole in the sequence. Once nothing is in flight the
  remaining batches are renumbered from ``acked_next`` and rebuilt (Java's
  adjustSequencesDueToFailedBatch).
- A batch that fails for good after a lost connection or timeout may or may not have been
  written, so later sequence numbers cannot be chosen safely: the partition fails (every
  waiting and later record to it gets the error) until the producer is recreated.
"""
import time

from pybroker.client.errors import KafkaTimeoutError
from pybroker.client.idempotence import MAX_IDEMPOTENT_IN_FLIGHT, next_sequence


def now_ms() -> int:
    """The clock of batch times (``created_ms``, ``retry_at``, linger): monotonic milliseconds."""
    return time.monotonic_ns() // 1_000_000


class ProducerBatch:
    """One record batch on its way to a partition leader."""
    __slots__ = ("topic", "partition", "builder", "entries", "created_ms", "nbytes", "count", "data",
                 "base_sequence", "ordinal", "attempts", "retry_at", "maybe_written", "done", "conn")

    def __init__(self, topic: str, partition: int, sealed):
        self.topic = topic
        self.partition = partition
        self.builder, self.entries, self.created_ms, self.nbytes, self.count = sealed
        self.data = None  # the built batch (what goes on the wire, the same bytes on every retry)
        self.base_sequence = -1
        self.ordinal = 0  # per-partition drain order, for sorting retries (sequences wrap)
        self.attempts = 0
        self.retry_at = 0
        self.maybe_written = False  # a send's outcome is unknown (lost connection, timeout)
        self.done = False  # completed (delivered or failed): later outcomes are ignored
        self.conn = None  # the connection of the request it is in flight on

    @property
    def tp(self):
        return self.topic, self.partition

    def __repr__(self):
        return (f"<ProducerBatch {self.topic}-{self.partition} {self.count} records seq {self.base_sequence} "
                f"attempts {self.attempts}>")


class PartitionState:
    __slots__ = ("next_seq", "acked_next", "confirmed", "inflight", "retry", "staged", "gap", "ordinals")

    def __init__(self):
        self.next_seq = 0
        self.acked_next = 0
        self.confirmed = False  # the broker acknowledged a batch (it has this producer's state)
        self.inflight = []
        self.retry = []
        self.staged = None  # drained and built, but the request was full: goes first next time
        self.gap = False
        self.ordinals = 0

    def unresolved(self) -> bool:
        return bool(self.inflight or self.retry or self.staged is not None)


class RecordAccumulator:
    """The loop-thread half of batching; see the module docstring."""

    def __init__(self, appender, *, codec: int, idempotent: bool, max_in_flight: int, linger_ms: int,
                 max_request_size: int):
        self.appender = appender
        self.codec = codec
        self.idempotent = idempotent
        self.per_partition_in_flight = min(max_in_flight, MAX_IDEMPOTENT_IN_FLIGHT) if idempotent else max_in_flight
        self.linger_ms = linger_ms
        self.max_request_size = max_request_size
        self.producer_id = -1
        self.producer_epoch = -1
        self.states: dict = {}
        self.flushing = 0  # flushes (and close) in progress: linger is skipped
        self.txn_gate = None  # a transactional producer's TransactionManager: which partitions may send
        self.transactional = False  # batches carry the transactional attribute
        self._rotate = 0

    def state(self, tp) -> PartitionState:
        st = self.states.get(tp)
        if st is None:
            st = self.states[tp] = PartitionState()
        return st

    def effective_linger(self) -> int:
        return 0 if self.flushing else self.linger_ms

    # ---- choosing batches -----------------------------------------------------------------

    def ready(self, now_ms: int):
        """(partitions with something to send now, earliest later time something will be ready or -1)."""
        ready, next_ms = self.appender.scan(now_ms, self.effective_linger())
        seen = set(ready)
        for tp, st in self.states.items():
            if st.retry and not st.inflight:
                at = st.retry[0].retry_at
                if at > now_ms:  # the partition waits for this retry, whatever else it holds
                    if next_ms < 0 or at < next_ms:
                        next_ms = at
                elif tp not in seen:
                    ready.append(tp)
            elif st.staged is not None and tp not in seen:
                ready.append(tp)
        if self.txn_gate is not None:  # only partitions already in the transaction
            ready = self.txn_gate.admit(ready)
        return ready, next_ms

    def drain(self, node_id: int, leader_of, now_ms: int, conn=None):
        """Batches for one Produce request to ``node_id`` on ``conn``: at most one per partition it
        leads, at most max.request.size bytes (at least one batch). Returns (batches, next_ms,
        leaderless) where ``leaderless`` says some ready partition has no known leader."""
        ready, next_ms = self.ready(now_ms)
        if not ready:
            return [], next_ms, False
        n = len(ready)
        start = self._rotate % n  # rotate the first partition so none starves behind a busy one
        self._rotate += 1
        batches, size, leaderless = [], 0, False
        linger = self.effective_linger()
        for i in range(n):
            tp = ready[(start + i) % n]
            leader = leader_of(tp)
            if leader < 0:
                leaderless = True
                continue
            if leader != node_id:
                continue
            st = self.state(tp)
            b = self._next_batch(tp, st, now_ms, linger, conn)
            if b is None:
                continue
            if batches and size + len(b.data) > self.max_request_size:
                st.staged = b
                break
            batches.append(b)
            size += len(b.data)
        if not batches and ready and self.appender.busy and (next_ms < 0 or next_ms > now_ms + 1):
            next_ms = now_ms + 1  # an append holds the open batch: look again shortly
        return batches, next_ms, leaderless

    def has_ready(self, node_id: int, leader_of, now_ms: int):
        """(whether a partition led by ``node_id`` has something to send, next_ms, leaderless):
        asked before connecting, so batches are drained only once a connection can take them."""
        ready, next_ms = self.ready(now_ms)
        leaders = [leader_of(tp) for tp in ready]
        return node_id in leaders, next_ms, any(x < 0 for x in leaders)

    def _next_batch(self, tp, st: PartitionState, now_ms: int, linger: int, conn=None):
        if len(st.inflight) >= (self.per_partition_in_flight if st.confirmed or not self.idempotent else 1):
            return None  # with idempotence, one batch in flight until the broker has the producer's state
        if st.inflight and (conn is None or conn.closed or any(x.conn is not conn for x in st.inflight)):
            return None  # in flight on a lost connection: wait until those are queued for retry
        if st.gap:
            if st.inflight:
                return None
            self._renumber(st)
        if st.staged is not None:
            if st.retry and st.retry[0].ordinal < st.staged.ordinal:
                self._requeue_staged(st)  # an older batch failed meanwhile: it goes first
            else:
                b, st.staged = st.staged, None
                return b
        if st.retry:
            if st.inflight or st.retry[0].retry_at > now_ms:
                return None
            return st.retry.pop(0)
        sealed = self.appender.pop_batch(tp[0], tp[1], now_ms - linger)
        if sealed is None:
            return None
        b = ProducerBatch(tp[0], tp[1], sealed)
        b.ordinal = st.ordinals
        st.ordinals += 1
        if self.idempotent:
            b.base_sequence = st.next_seq
            st.next_seq = next_sequence(st.next_seq, b.count)
            b.data = b.builder.build(self.codec, self.producer_id, self.producer_epoch, b.base_sequence,
                                     self.transactional)
        else:
            b.data = b.builder.build(self.codec)
            b.builder = None  # never rebuilt without sequence numbers
        return b

    def _requeue_staged(self, st: PartitionState) -> None:
        b, st.staged = st.staged, None
        b.retry_at = 0
        st.retry.append(b)
        st.retry.sort(key=lambda x: x.ordinal)

    def _renumber(self, st: PartitionState) -> None:
        waiting = sorted(st.retry + ([st.staged] if st.staged is not None else []), key=lambda b: b.ordinal)
        seq = st.acked_next
        for b in waiting:
            if b.base_sequence != seq:
                b.base_sequence = seq
                b.data = b.builder.build(self.codec, self.producer_id, self.producer_epoch, seq, self.transactional)
            seq = next_sequence(seq, b.count)
        st.next_seq = seq
        st.gap = False

    # ---- outcomes -------------------------------------------------------------------------

    def sent(self, b: ProducerBatch, conn=None) -> None:
        b.attempts += 1
        b.conn = conn
        self.state(b.tp).inflight.append(b)

    def acked(self, b: ProducerBatch) -> None:
        st = self.state(b.tp)
        _remove(st.inflight, b)
        b.conn = None
        if self.idempotent:
            st.acked_next = next_sequence(b.base_sequence, b.count)
            st.confirmed = True

    def out_of_order_is_retriable(self, b: ProducerBatch) -> bool:
        """OUT_OF_ORDER_SEQUENCE_NUMBER for a batch behind an unresolved one (in flight, waiting to
        be retried, or failed and about to be renumbered away) just means the earlier batch has to
        land first; otherwise the broker and the producer disagree on the sequence: fatal."""
        st = self.state(b.tp)
        if st.gap:
            return True
        waiting = st.inflight + st.retry + ([st.staged] if st.staged is not None else [])
        return any(x is not b and x.ordinal < b.ordinal for x in waiting)

    def requeue(self, b: ProducerBatch, retry_at: int, maybe_written: bool) -> None:
        """Put an in-flight batch back to be resent (unchanged) at ``retry_at``."""
        st = self.state(b.tp)
        _remove(st.inflight, b)
        b.conn = None
        b.retry_at = retry_at
        b.maybe_written = b.maybe_written or maybe_written
        st.retry.append(b)
        st.retry.sort(key=lambda x: x.ordinal)

    def dropped(self, b: ProducerBatch, maybe_written: bool) -> bool:
        """A batch failed for good (already out of the in-flight/retry lists or never sent). True if
        the partition's sequence state is now unknowable (the caller fails the partition)."""
        st = self.state(b.tp)
        _remove(st.inflight, b)
        _remove(st.retry, b)
        b.conn = None
        if st.staged is b:
            st.staged = None
        if not self.idempotent or b.base_sequence < 0:
            return False
        if maybe_written or b.maybe_written:
            return True
        st.gap = True
        return False

    def expire(self, now_ms: int, timeout_ms: int):
        """Batches older than delivery.timeout.ms that are not in flight, each with its error."""
        before = now_ms - timeout_ms
        out = []
        for name, ts in list(self.appender.topics.items()):
            for p in range(ts.num_partitions):
                while True:
                    sealed = self.appender.pop_expired(name, p, before)
                    if sealed is None:
                        break
                    out.append(ProducerBatch(name, p, sealed))
        for st in self.states.values():
            for b in list(st.retry) + ([st.staged] if st.staged is not None else []):
                if b.created_ms <= before:
                    out.append(b)
        return [(b, KafkaTimeoutError(
            f"expiring {b.count} record(s) for {b.topic}-{b.partition}: {now_ms - b.created_ms} ms has passed "
            f"since batch creation (delivery.timeout.ms)")) for b in out]

    def take_partition(self, tp):
        """Every waiting batch of a partition (appender's and retries), for failing it."""
        out = []
        st = self.states.get(tp)
        if st is not None:
            out += st.retry
            if st.staged is not None:
                out.append(st.staged)
            st.retry, st.staged = [], None
        if tp[0] in self.appender.topics:
            out += [ProducerBatch(tp[0], tp[1], s) for s in self.appender.take_all(tp[0], tp[1])]
        return out

    def take_everything(self):
        """Every batch not in flight, for aborting on close."""
        out = []
        for tp in list(self.states):
            out += self.take_partition(tp)
        for name, ts in list(self.appender.topics.items()):
            for p in range(ts.num_partitions):
                if (name, p) not in self.states:
                    out += [ProducerBatch(name, p, s) for s in self.appender.take_all(name, p)]
        return out

    def in_flight(self) -> int:
        return sum(len(st.inflight) for st in self.states.values())


def _remove(items: list, b) -> None:
    for i, x in enumerate(items):
        if x is b:
            del items[i]
            return

