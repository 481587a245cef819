"""The share consumer's bookkeeping (KIP-932), without I/O: share sessions, acquired records and
acknowledgements.

``ShareSession``: the client's side of one share session with one partition leader. ShareFetch with
epoch 0 opens it (naming every partition wanted from that leader, acknowledging nothing), each later
request carries the next epoch and names only the partitions to add (plus those it acknowledges) and
the partitions to forget; epoch -1 closes it. A session that fails (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, a lost connection) is reset to epoch 0 under a new incarnation: what its
records were acquired under is gone on the broker.

``deliverable``: of a ShareFetch partition's records, those inside the acquired ranges, each with the
range's delivery count; offsets of acquired ranges without a record (compacted away) are gaps,
acknowledged as GAP; acquired offsets past the last complete batch the response carried are released
(their records did not come). Records outside the ranges belong to other members and are skipped.

``Acknowledgements``: records handed to the application wait for their acknowledgement (explicit mode:
``acknowledge``; implicit mode: all accepted by the next poll or commit). Acknowledged records are staged
until the next poll/commit/close makes them due; due ones go out with the next request to the leader
they came from, compressed into batches (``ack_batches``: one type per contiguous range, or one per
offset). Each record remembers its *source* (leader node, session incarnation): acknowledgements of a
session that no longer exists fail at once. Commit waiters track, per (source, partition), how many
requests carried acknowledgements and how many were answered, so ``commit_sync`` waits for exactly what
was outstanding when it started. Guarded by a lock: the blocking consumer acknowledges from the
application's thread while the event loop sends.
"""
import threading
from enum import IntEnum

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
INT32_MAX = 2**31 - 1


class AcknowledgeType(IntEnum):
    """How a delivered record is acknowledged (the protocol's AcknowledgeTypes; equal to
    confluent-kafka's ``AcknowledgeType`` members)."""
    ACCEPT = 1  # processed: never delivered again
    RELEASE = 2  # not processed: deliver it again (to any member), with a higher delivery count
    REJECT = 3  # unprocessable: never delivered again


GAP = 0  # an acquired offset without a record
_BY_NAME = {t.name.lower(): int(t) for t in AcknowledgeType}


class IllegalStateError(RuntimeError):
    """A call the share consumer's state does not allow now (Kafka's IllegalStateException)."""


def ack_type(value) -> int:
    """The protocol value of an acknowledge type: "accept"/"release"/"reject" (any case), 1-3, or an
    AcknowledgeType (ours or confluent-kafka's)."""
    if isinstance(value, str):
        t = _BY_NAME.get(value.strip().lower())
        if t is None:
            raise ValueError(f"acknowledge type must be one of {', '.join(_BY_NAME)}, not {value!r}")
        return t
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"acknowledge type must be a string or an AcknowledgeType, not {type(value).__name__}")
    if int(value) not in _BY_NAME.values():
        raise ValueError(f"acknowledge type must be 1 (accept), 2 (release) or 3 (reject), not {int(value)}")
    return int(value)


def ack_batches(acks: dict) -> list:
    """``{offset: type}`` -> [(first, last, [types])]: one batch per run of consecutive offsets, with a
    single type when the whole run has one, else one type per offset."""
    out = []
    run = []
    for offset in sorted(acks):
        if run and offset != run[-1] + 1:
            out.append(_batch(run, acks))
            run = []
        run.append(offset)
    if run:
        out.append(_batch(run, acks))
    return out


def _batch(run: list, acks: dict) -> tuple:
    types = [acks[o] for o in run]
    if all(t == types[0] for t in types):
        types = types[:1]
    return run[0], run[-1], types


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class SessionRequest:
    """What one request of a share session says: its epoch, the partitions it adds and forgets."""
    __slots__ = ("epoch", "added", "forgotten")

    def __init__(self, epoch: int, added: list, forgotten: list):
        self.epoch = epoch
        self.added = added
        self.forgotten = forgotten


class ShareSession:
    """The client side of the share session with one leader: the epoch of the next request and the
    partitions the leader has in the session."""

    def __init__(self, node: int):
        self.node = node
        self.epoch = INITIAL_EPOCH
        self.partitions: set = set()  # TopicPartitions the leader fetches for this session
        self.incarnation = 0  # bumped at every reset: records acquired before belong to a dead session

    @property
    def is_open(self) -> bool:
        return self.epoch != INITIAL_EPOCH

    @property
    def source(self) -> tuple:
        """What records fetched in this session are acknowledged through: (node, incarnation)."""
        return self.node, self.incarnation

    def fetch_request(self, wanted) -> SessionRequest:
        """A ShareFetch for ``wanted`` partitions: epoch 0 names them all; later ones add what is new
        and forget what is no longer wanted."""
        wanted = set(wanted)
        if not self.is_open:
            return SessionRequest(INITIAL_EPOCH, sorted(wanted), [])
        return SessionRequest(self.epoch, sorted(wanted - self.partitions), sorted(self.partitions - wanted))

    def acknowledge_request(self) -> SessionRequest:
        """A ShareAcknowledge (never sent without a session: acknowledgements cannot open one)."""
        if not self.is_open:
            raise IllegalStateError("no share session to acknowledge through")
        return SessionRequest(self.epoch, [], [])

    def close_request(self) -> SessionRequest:
        return SessionRequest(FINAL_EPOCH, [], [])

    def answered(self, req: SessionRequest) -> None:
        """The leader accepted ``req``: move to the next epoch (or forget the session after epoch -1)."""
        if req.epoch == FINAL_EPOCH:
            self.reset()
            return
        if req.epoch == INITIAL_EPOCH:
            self.partitions = set(req.added)
        else:
            self.partitions |= set(req.added)
            self.partitions -= set(req.forgotten)
        self.epoch = next_epoch(req.epoch)

    def reset(self) -> None:
        """The session is gone (error, lost connection, closed): the next request opens a new one."""
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self.incarnation += 1


class ShareConsumerRecord:
    """One record delivered by a share consumer; attributes are read-only. As ConsumerRecord, plus
    ``delivery_count``: how many times the record has been delivered (1 the first time)."""

    __slots__ = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
                 "headers", "leader_epoch", "delivery_count")

    def __init__(self, topic, partition, offset, timestamp, timestamp_type, key, value, headers,
                 leader_epoch=-1, delivery_count=1):
        _set = object.__setattr__
        _set(self, "topic", topic)
        _set(self, "partition", int(partition))
        _set(self, "offset", int(offset))
        _set(self, "timestamp", int(timestamp))
        _set(self, "timestamp_type", int(timestamp_type))
        _set(self, "key", key)
        _set(self, "value", value)
        _set(self, "headers", headers)
        _set(self, "leader_epoch", int(leader_epoch))
        _set(self, "delivery_count", int(delivery_count))

    @classmethod
    def of(cls, r, delivery_count: int, key=None, value=None, deserialized: bool = False):
        """From a decoded ConsumerRecord (with other key/value when ``deserialized``)."""
        if not deserialized:
            key, value = r.key, r.value
        return cls(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, key, value, r.headers,
                   r.leader_epoch, delivery_count)

    def __setattr__(self, name, value):
        raise AttributeError(f"ShareConsumerRecord attribute {name!r} is read-only")

    def __delattr__(self, name):
        raise AttributeError(f"ShareConsumerRecord attribute {name!r} is read-only")

    def _fields(self):
        return (self.topic, self.partition, self.offset, self.timestamp, self.timestamp_type, self.key,
                self.value, self.headers, self.leader_epoch, self.delivery_count)

    def __eq__(self, other):
        if not isinstance(other, ShareConsumerRecord):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None

    def __reduce__(self):
        return (ShareConsumerRecord, self._fields())

    def __repr__(self):
        return (f"ShareConsumerRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, key={self.key!r}, value={self.value!r}, headers={self.headers!r}, "
                f"delivery_count={self.delivery_count})")


def deliverable(records, acquired, end: int) -> tuple:
    """``records`` (decoded, in offset order) of one partition, its ``acquired`` ranges (first, last,
    delivery count) and ``end``, one past the last complete batch the response held ->
    ([(record, delivery count)] inside the ranges, [gap offsets]: acquired offsets below ``end`` that no
    record has, [missing offsets]: acquired offsets at or past ``end``, whose records did not come)."""
    ranges = sorted((int(a[0]), int(a[1]), int(a[2])) for a in acquired if a[1] >= a[0])
    out, gaps, missing = [], [], []
    i, n = 0, len(records)
    for first, last, count in ranges:
        while i < n and records[i].offset < first:
            i += 1  # before the range: another member's (or already settled)
        expected = first
        while i < n and records[i].offset <= last:
            r = records[i]
            gaps.extend(range(expected, r.offset))
            out.append((r, count))
            expected = r.offset + 1
            i += 1
        gaps.extend(range(expected, min(last + 1, max(end, expected))))
        missing.extend(range(max(expected, end), last + 1))
    return out, gaps, missing


class AckSend:
    """Acknowledgements taken for one request to a leader: ``acks`` {tp: {offset: type}} of the live
    session, ``stale`` the same for sessions that are gone (failed without a request)."""
    __slots__ = ("node", "acks", "stale", "keys", "stale_keys")

    def __init__(self, node: int):
        self.node = node
        self.acks: dict = {}
        self.stale: dict = {}
        self.keys: list = []  # (source, tp) of ``acks``
        self.stale_keys: list = []

    def __bool__(self) -> bool:
        return bool(self.acks)

    def batches(self) -> dict:
        """{tp: [(first, last, [types])]}."""
        return {tp: ack_batches(offsets) for tp, offsets in self.acks.items()}


class CommitWaiter:
    """What one commit waits for: (source, tp) -> the number of answered requests that means done."""

    def __init__(self, targets: dict):
        self.targets = targets
        self.results: dict = {}  # tp -> None (all succeeded) or the first KafkaError
        self.on_done = None  # called (on the sender's thread) once every target is answered
        self.done = False

    def note(self, key, answered: int, error) -> None:
        if answered > self.targets[key]:
            return  # acknowledgements made after the commit started
        tp = key[1]
        if error is not None and self.results.get(tp) is None:
            self.results[tp] = error
        else:
            self.results.setdefault(tp, None)


class Acknowledgements:
    """Held, staged, due and in-flight acknowledgements of one share consumer (thread-safe)."""

    def __init__(self, explicit: bool):
        self.explicit = explicit
        self.lock = threading.Lock()
        self._held: dict = {}  # tp -> {offset: source}: handed to the application, not acknowledged yet
        self._staged: dict = {}  # (source, tp) -> {offset: type}: acknowledged, waiting for poll/commit
        self._due: dict = {}  # (source, tp) -> {offset: type}: go with the next request to source's node
        self._sent: dict = {}  # (source, tp) -> requests that carried its acknowledgements
        self._answered: dict = {}  # (source, tp) -> of those, how many were answered
        self._waiters: list = []
        self.completed: list = []  # ({tp: {offsets}}, error) for the acknowledgement commit callback
        self.record_completions = False

    # ---- the application's side ---------------------------------------------------------------

    def hold(self, tp, offsets, source) -> None:
        """Records of ``tp`` handed to the application."""
        with self.lock:
            held = self._held.setdefault(tp, {})
            for o in offsets:
                held[o] = source

    def held_count(self) -> int:
        with self.lock:
            return sum(len(h) for h in self._held.values())

    def acknowledge(self, tp, offset: int, kind: int) -> None:
        """Explicit mode: the application acknowledges one record it was given."""
        with self.lock:
            held = self._held.get(tp)
            source = held.pop(offset, None) if held is not None else None
            if source is None:
                raise IllegalStateError(f"record {tp.topic}-{tp.partition}@{offset} is not waiting for an "
                                        "acknowledgement: it was not delivered by the last poll, or is "
                                        "acknowledged already")
            if not held:
                del self._held[tp]
            self._staged.setdefault((source, tp), {})[offset] = kind

    def settle_held(self, kind: int) -> int:
        """Stage every held record with ``kind`` (implicit mode: ACCEPT; closing: RELEASE); how many."""
        with self.lock:
            n = 0
            for tp, held in self._held.items():
                for offset, source in held.items():
                    self._staged.setdefault((source, tp), {})[offset] = kind
                    n += 1
            self._held = {}
            return n

    def stage(self, source, tp, offsets, kind: int) -> None:
        """Acknowledge offsets the application never sees (gaps; releases of undelivered records)."""
        with self.lock:
            staged = self._staged.setdefault((source, tp), {})
            for o in offsets:
                staged[o] = kind

    def flush(self) -> bool:
        """Make the staged acknowledgements due (poll, commit, close); True if there were any."""
        with self.lock:
            if not self._staged:
                return False
            for key, offsets in self._staged.items():
                self._due.setdefault(key, {}).update(offsets)
            self._staged = {}
            return True

    def due_nodes(self) -> set:
        with self.lock:
            return {key[0][0] for key in self._due}

    def pending(self) -> bool:
        """Anything staged, due or in flight."""
        with self.lock:
            return bool(self._staged or self._due or self._outstanding_locked())

    def _outstanding_locked(self) -> list:
        return [k for k, n in self._sent.items() if self._answered.get(k, 0) < n]

    # ---- the sender's side ----------------------------------------------------------------------

    def take(self, node: int, incarnation: int) -> AckSend:
        """The due acknowledgements of records fetched from ``node``: those of its session
        ``incarnation`` to send, the others (dead sessions) to fail. Each taken key must be
        ``complete``d once."""
        send = AckSend(node)
        with self.lock:
            for key in [k for k in self._due if k[0][0] == node]:
                offsets = self._due.pop(key)
                (_, inc), tp = key
                if inc == incarnation:
                    send.acks[tp] = offsets
                    send.keys.append(key)
                else:
                    send.stale[tp] = {**send.stale.get(tp, {}), **offsets}
                    send.stale_keys.append(key)
                self._sent[key] = self._sent.get(key, 0) + 1
        return send

    def complete(self, keys, acks: dict, errors: dict, default_error=None) -> None:
        """The answer to acknowledgements taken with ``take``: ``errors`` {tp: KafkaError or None};
        a partition without an answer gets ``default_error``."""
        finished = []
        with self.lock:
            for key in keys:
                tp = key[1]
                error = errors.get(tp, default_error)
                answered = self._answered[key] = self._answered.get(key, 0) + 1
                for w in self._waiters:
                    if key in w.targets:
                        w.note(key, answered, error)
                if self.record_completions:
                    self.completed.append(({tp: set(acks.get(tp, ()))}, error))
            for w in self._waiters:
                if all(self._answered.get(k, 0) >= n for k, n in w.targets.items()):
                    w.done = True
                    finished.append(w)
            for w in finished:
                self._waiters.remove(w)
            for key in keys:  # settled and awaited by nobody: forget the counts
                if (self._answered.get(key, 0) >= self._sent.get(key, 0)
                        and not any(key in w.targets for w in self._waiters)):
                    self._answered.pop(key, None)
                    self._sent.pop(key, None)
        for w in finished:
            if w.on_done is not None:
                w.on_done()

    def waiter(self) -> CommitWaiter | None:
        """A waiter for everything due or in flight now (call ``flush`` first); None if nothing is."""
        with self.lock:
            targets = {key: self._sent.get(key, 0) + 1 for key in self._due}
            for key in self._outstanding_locked():
                targets.setdefault(key, self._sent[key])
            if not targets:
                return None
            w = CommitWaiter(targets)
            self._waiters.append(w)
            return w

    def forget_waiter(self, w: CommitWaiter) -> None:
        with self.lock:
            if w in self._waiters:
                self._waiters.remove(w)

    def take_completed(self) -> list:
        with self.lock:
            out, self.completed = self.completed, []
            return out
