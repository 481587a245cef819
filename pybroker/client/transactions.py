"""The transactional producer's side of KIP-98: its state, and the requests to the transaction
coordinator (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and to the group
coordinator (TxnOffsetCommit). Everything here runs on the producer's event loop.

States: UNINITIALIZED → (init_transactions) READY → (begin_transaction) IN_TRANSACTION →
(commit_transaction: COMMITTING | abort_transaction: ABORTING) → READY. A failed record or
request moves the transaction to ABORTABLE_ERROR (only ``abort_transaction`` helps); fencing,
authorization and protocol errors move the producer to FATAL_ERROR (only closing helps).

A partition joins the transaction (AddPartitionsToTxn) before its first batch is sent: the
accumulator asks ``admit`` which ready partitions may be drained, and partitions not yet added
are collected and added together in one request (more gathered while one is in flight), as
librdkafka does. Aborting purges what was not sent, waits for what is in flight, and ends the
transaction; when batches with sequence numbers were dropped or failed, the producer's epoch is
bumped (InitProducerId with the current id and epoch) so every partition's sequence restarts.
"""
import asyncio
import logging
import time

from pybroker.client.cluster import TRANSACTION_KEY, backoff_s
from pybroker.client.errors import KafkaError, TransactionError, error_for
from pybroker.client.idempotence import INIT_PRODUCER_ID, INIT_PRODUCER_ID_RANGE
from pybroker.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
ADD_PARTITIONS_RANGE = (0, 3)  # v4+ is the brokers' batched verification form
ADD_OFFSETS_RANGE = END_TXN_RANGE = TXN_OFFSET_COMMIT_RANGE = (0, 4)  # v4: TRANSACTION_ABORTABLE (abortable)

UNINITIALIZED, INITIALIZING, READY, IN_TRANSACTION = "UNINITIALIZED", "INITIALIZING", "READY", "IN_TRANSACTION"
COMMITTING, ABORTING = "COMMITTING_TRANSACTION", "ABORTING_TRANSACTION"
ABORTABLE_ERROR, FATAL_ERROR = "ABORTABLE_ERROR", "FATAL_ERROR"

# errors after which this producer instance can do nothing more (Java's fatal errors)
FATAL_CODES = frozenset({
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
})
# AddPartitionsToTxn answers that mean "send it again shortly"
ADD_RETRY_CODES = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
})
FENCED_CODES = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
CONCURRENT_BACKOFF_MS = 20  # the coordinator is finishing the previous transaction: ask again soon


def state_error(message: str) -> TransactionError:
    return TransactionError(ErrorCode.INVALID_TXN_STATE, message)


def classify(exc: KafkaError, *, fatal_codes=FATAL_CODES) -> TransactionError:
    """A broker or client error as the transactional producer reports it: fatal, retriable (a
    timeout: call again) or abortable."""
    if isinstance(exc, TransactionError):
        return exc
    if exc.code in fatal_codes:
        name = "PRODUCER_FENCED" if exc.code in FENCED_CODES else exc.name
        return TransactionError(exc.code, exc.message, fatal=True, name=name)
    if exc.retriable:
        return TransactionError(exc.code, exc.message, retriable=True, name=exc.name)
    return TransactionError(exc.code, exc.message, txn_requires_abort=True, name=exc.name)


class TransactionManager:
    """One transactional producer's transaction state; see the module docstring."""

    def __init__(self, engine):
        self.engine = engine
        self.transactional_id = engine.cfg["transactional.id"]
        self.timeout_ms = engine.cfg["transaction.timeout.ms"]
        self.state = UNINITIALIZED
        self.error = None  # the abortable or fatal error that ended the transaction
        self.added = set()  # partitions the coordinator has in the ongoing transaction
        self.pending = set()  # partitions waiting for AddPartitionsToTxn
        self.maybe_added = False  # an AddPartitionsToTxn or AddOffsetsToTxn went out: EndTxn is needed
        self.adding = None  # the task sending AddPartitionsToTxn
        self.bump_epoch = False  # numbered batches were lost: restart sequences under a new epoch
        self.progress = asyncio.Event()  # a batch completed or the transaction failed

    # ---- checks the front ends make (any thread) --------------------------------------------

    def check_produce(self) -> None:
        """Raise unless records may be produced now (a transaction is open)."""
        if self.state == IN_TRANSACTION:
            return
        if self.error is not None:
            raise self.error
        raise state_error(f"produce needs an open transaction (begin_transaction); the state is {self.state}")

    def _require(self, *states, what: str) -> None:
        if self.state == FATAL_ERROR:
            raise self.error
        if self.state not in states:
            if self.state == ABORTABLE_ERROR and what != "abort_transaction":
                raise TransactionError(self.error.code, f"{what}: the transaction must be aborted first "
                                       f"({self.error.name}: {self.error.message})", txn_requires_abort=True,
                                       name=self.error.name)
            raise state_error(f"{what} is not valid in state {self.state}")

    # ---- errors -----------------------------------------------------------------------------

    def fail(self, err: KafkaError) -> TransactionError:
        """Record an error that ends the transaction (or, if fatal, the producer); returns it."""
        err = classify(err) if not isinstance(err, TransactionError) else err
        if err.retriable:  # a record that timed out: the transaction cannot commit
            err = TransactionError(err.code, err.message, txn_requires_abort=True, name=err.name)
        if self.state == FATAL_ERROR:
            return self.error
        if err.fatal:
            self.state, self.error = FATAL_ERROR, err
        elif self.state in (IN_TRANSACTION, COMMITTING):
            self.state, self.error = ABORTABLE_ERROR, err
        self.progress.set()
        return err

    def batch_failed(self, err: KafkaError, sequence_lost: bool) -> None:
        """A batch (or a record before batching) failed for good."""
        if sequence_lost or err.code in FENCED_CODES or err.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            self.bump_epoch = True
        self.fail(err)

    # ---- partitions joining the transaction --------------------------------------------------

    def admit(self, ready: list) -> list:
        """The partitions of ``ready`` whose batches may be sent now; the others are queued for
        AddPartitionsToTxn (nothing is sent outside an open transaction)."""
        if self.state not in (IN_TRANSACTION, COMMITTING):
            return []
        added = self.added
        out = [tp for tp in ready if tp in added]
        if len(out) != len(ready):
            self.register([tp for tp in ready if tp not in added])
        return out

    def register(self, tps) -> None:
        """Partitions that hold records of the transaction (called when batches appear)."""
        if self.state not in (IN_TRANSACTION, COMMITTING):
            return
        new = [tp for tp in tps if tp not in self.added and tp not in self.pending]
        if not new:
            return
        self.pending.update(new)
        if self.adding is None or self.adding.done():
            self.adding = self.engine.loop.create_task(self._add_partitions(), name="producer-add-partitions")

    async def _add_partitions(self) -> None:
        api = REQUESTS[ADD_PARTITIONS]
        acc = self.engine.acc
        attempt = 0
        while self.pending and self.state in (IN_TRANSACTION, COMMITTING):
            asked = sorted(self.pending)
            by_topic: dict = {}
            for topic, partition in asked:
                by_topic.setdefault(topic, []).append(partition)
            req = api(v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=acc.producer_id,
                      v3_and_below_producer_epoch=acc.producer_epoch,
                      v3_and_below_topics=[api.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                           for t, ps in by_topic.items()])
            self.maybe_added = True
            try:
                body = await self._coordinator_call(req, ADD_PARTITIONS_RANGE, self._remaining_s(None),
                                                    check=lambda b: 0)
            except KafkaError as exc:
                self.fail(exc)
                return
            retry, failure = False, None
            for t in body.results_by_topic_v3_and_below:
                for p in t.results_by_partition:
                    tp = TopicPartition(t.name, p.partition_index)
                    code = p.partition_error_code
                    if code == 0:
                        self.added.add(tp)
                        self.pending.discard(tp)
                    elif code in ADD_RETRY_CODES:
                        retry = True
                        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                            self.engine.cluster.forget_coordinator(self.transactional_id, TRANSACTION_KEY)
                    elif failure is None:
                        failure = error_for(code, f"AddPartitionsToTxn {t.name}-{p.partition_index}")
            if failure is not None:
                self.fail(failure)
                return
            self.engine.kick_all()
            if retry:
                cfg = self.engine.cfg
                delay = backoff_s(attempt, CONCURRENT_BACKOFF_MS, cfg["retry.backoff.max.ms"])
                attempt += 1
                await asyncio.sleep(delay)
            else:
                attempt = 0

    # ---- the user's operations (coroutines on the loop) ---------------------------------------

    async def init(self, timeout_s: float | None) -> None:
        """InitProducerId with the transactional id: fences older producers of this id and
        completes (or aborts) their transaction; then the producer is READY."""
        self._require(UNINITIALIZED, INITIALIZING, what="init_transactions")
        self.state = INITIALIZING
        deadline = self._deadline(timeout_s)
        try:
            await self._init_producer_id(-1, -1, deadline)
        except KafkaError as exc:
            raise self._init_error(exc) from None
        self.state = READY
        pid_ready = self.engine.pid_ready
        if not pid_ready.done():
            pid_ready.set_result(None)
        self.engine.kick_all()

    def _init_error(self, exc) -> TransactionError:
        err = classify(exc, fatal_codes=FATAL_CODES | {ErrorCode.INVALID_TXN_STATE})
        if not err.retriable:  # anything but a timeout leaves the producer unusable
            err = TransactionError(err.code, err.message, fatal=True, name=err.name)
            self.state, self.error = FATAL_ERROR, err
        return err

    async def _init_producer_id(self, producer_id: int, producer_epoch: int, deadline: float) -> None:
        req = REQUESTS[INIT_PRODUCER_ID](transactional_id=self.transactional_id,
                                         transaction_timeout_ms=self.timeout_ms,
                                         producer_id=producer_id, producer_epoch=producer_epoch)
        body = await self._coordinator_call(req, INIT_PRODUCER_ID_RANGE, self._left(deadline))
        acc = self.engine.acc
        acc.producer_id, acc.producer_epoch = body.producer_id, body.producer_epoch
        acc.states.clear()  # a new epoch (or id): every partition's sequence starts at 0
        self.bump_epoch = False

    def begin(self) -> None:
        self._require(READY, what="begin_transaction")
        self.added.clear()
        self.pending.clear()
        self.maybe_added = False
        self.error = None
        self.state = IN_TRANSACTION

    async def send_offsets(self, offsets, group_metadata, timeout_s: float | None) -> None:
        """AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group's."""
        self._require(IN_TRANSACTION, what="send_offsets_to_transaction")
        meta = _group_metadata(group_metadata)
        chosen = _offsets(offsets)
        if not chosen:
            return
        deadline = self._deadline(timeout_s)
        acc = self.engine.acc
        try:
            self.maybe_added = True
            await self._coordinator_call(REQUESTS[ADD_OFFSETS](
                transactional_id=self.transactional_id, producer_id=acc.producer_id,
                producer_epoch=acc.producer_epoch, group_id=meta.group_id), ADD_OFFSETS_RANGE, self._left(deadline))
            await self._txn_offset_commit(chosen, meta, deadline)
        except KafkaError as exc:
            err = classify(exc)
            if err.retriable:
                raise err from None
            raise self.fail(err) from None

    async def _txn_offset_commit(self, chosen: dict, meta, deadline: float) -> None:
        api = REQUESTS[TXN_OFFSET_COMMIT]
        acc = self.engine.acc
        by_topic: dict = {}
        for tp, om in chosen.items():
            by_topic.setdefault(tp.topic, []).append(api.TxnOffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
                committed_metadata=om.metadata or ""))
        req = api(transactional_id=self.transactional_id, group_id=meta.group_id, producer_id=acc.producer_id,
                  producer_epoch=acc.producer_epoch, generation_id=meta.generation_id, member_id=meta.member_id,
                  group_instance_id=meta.group_instance_id,
                  topics=[api.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        def check(body):
            for t in body.topics:
                for p in t.partitions:
                    if p.error_code:
                        return p.error_code, f"TxnOffsetCommit {t.name}-{p.partition_index} for group {meta.group_id}"
            return 0

        await self.engine.cluster.call(None, req, *TXN_OFFSET_COMMIT_RANGE, timeout_s=self._left(deadline),
                                       check=check, group_id=meta.group_id)

    async def commit(self, timeout_s: float | None) -> None:
        """Send every record of the transaction, then EndTxn(commit). A timeout may be retried."""
        self._require(IN_TRANSACTION, COMMITTING, what="commit_transaction")
        self.state = COMMITTING
        deadline = self._deadline(timeout_s)
        eng = self.engine
        eng.begin_flush()
        try:
            while eng.appender.pending > 0 and self.state == COMMITTING:
                if not await _wait(self.progress, min(0.05, self._left(deadline))):
                    if time.monotonic() >= deadline:
                        raise TransactionError(ErrorCode.REQUEST_TIMED_OUT, f"{eng.appender.pending} record(s) "
                                               "still undelivered; commit_transaction may be called again",
                                               retriable=True)
        finally:
            eng.end_flush()
        if self.state != COMMITTING:
            self._require(COMMITTING, what="commit_transaction")
        await self._end(True, deadline)

    async def abort(self, timeout_s: float | None) -> None:
        """Drop unsent records, wait for those in flight, then EndTxn(abort)."""
        self._require(IN_TRANSACTION, COMMITTING, ABORTING, ABORTABLE_ERROR, what="abort_transaction")
        self.state = ABORTING
        deadline = self._deadline(timeout_s)
        self._purge()
        eng = self.engine
        while eng.acc.in_flight() or (self.adding is not None and not self.adding.done()):
            if not await _wait(self.progress, min(0.05, self._left(deadline))) and time.monotonic() >= deadline:
                raise TransactionError(ErrorCode.REQUEST_TIMED_OUT, "batches still in flight; abort_transaction "
                                       "may be called again", retriable=True)
        self._purge()  # batches back from flight to be retried must not leak into the next transaction
        await self._end(False, deadline)

    async def _end(self, commit: bool, deadline: float) -> None:
        acc = self.engine.acc
        if self.maybe_added:
            req = REQUESTS[END_TXN](transactional_id=self.transactional_id, producer_id=acc.producer_id,
                                    producer_epoch=acc.producer_epoch, committed=commit)
            try:
                await self._coordinator_call(req, END_TXN_RANGE, self._left(deadline))
            except KafkaError as exc:
                if not (exc.code == ErrorCode.INVALID_TXN_STATE and not commit and not self.added):
                    err = classify(exc, fatal_codes=FATAL_CODES | {ErrorCode.INVALID_TXN_STATE})
                    if err.retriable:
                        raise err from None
                    raise self.fail(err) from None
                # an abort the coordinator never heard of (nothing was added): nothing to end
        if self.bump_epoch:
            try:
                await self._init_producer_id(acc.producer_id, acc.producer_epoch, deadline)
            except KafkaError as exc:
                err = classify(exc)
                if err.retriable:
                    raise err from None
                raise self.fail(TransactionError(err.code, err.message, fatal=True, name=err.name)) from None
        self.added.clear()
        self.pending.clear()
        self.maybe_added = False
        self.error = None
        self.state = READY

    def _purge(self) -> None:
        """Fail every record not yet sent with a purge error (as librdkafka's abort does)."""
        eng = self.engine
        err = KafkaError(-152, "the transaction was aborted before the record was sent", retriable=False,
                         name="PURGE_QUEUE")
        for b in eng.acc.take_everything():
            if b.base_sequence >= 0:  # numbered, maybe sent: its sequence cannot be reused
                self.bump_epoch = True
            eng.acc.dropped(b, False)
            eng.complete(b, err)
        eng.fail_held(err)
        self.pending.clear()

    # ---- helpers ----------------------------------------------------------------------------

    async def _coordinator_call(self, obj, version_range, timeout_s: float, check=None):
        return await self.engine.cluster.call(None, obj, *version_range, timeout_s=max(0.001, timeout_s),
                                              check=check, group_id=self.transactional_id,
                                              coordinator_key=TRANSACTION_KEY)

    def _deadline(self, timeout_s) -> float:
        if timeout_s is None or timeout_s < 0:
            timeout_s = self.engine.max_block_ms / 1000
        return time.monotonic() + timeout_s

    def _remaining_s(self, deadline) -> float:
        return self.engine.cfg.seconds("delivery.timeout.ms") if deadline is None else self._left(deadline)

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())


def _group_metadata(meta) -> ConsumerGroupMetadata:
    if isinstance(meta, ConsumerGroupMetadata):
        return meta
    if isinstance(meta, str):  # a bare group id: no generation checks (Java's deprecated form)
        return ConsumerGroupMetadata(meta)
    raise TypeError("group_metadata must come from Consumer.consumer_group_metadata() (or be a group id)")


def _offsets(offsets) -> dict:
    """{TopicPartition: OffsetAndMetadata} from a dict {tp: offset | OffsetAndMetadata}, or from
    (topic, partition, offset) tuples or objects with topic/partition/offset (confluent's form)."""
    if isinstance(offsets, dict):
        items = list(offsets.items())
    else:
        items = []
        for o in offsets:
            if hasattr(o, "offset") and hasattr(o, "topic"):
                items.append(((o.topic, o.partition), o.offset))
            else:
                items.append(((o[0], o[1]), o[2]))
    out = {}
    for (topic, partition), value in items:
        if isinstance(value, OffsetAndMetadata):
            om = value
        elif isinstance(value, tuple):
            om = OffsetAndMetadata(*value)
        else:
            om = OffsetAndMetadata(int(value))
        out[TopicPartition(topic, int(partition))] = om
    return out


async def _wait(event: asyncio.Event, timeout_s: float) -> bool:
    event.clear()
    try:
        await asyncio.wait_for(event.wait(), max(0.0, timeout_s))
    except asyncio.TimeoutError:
        return False
    return True
