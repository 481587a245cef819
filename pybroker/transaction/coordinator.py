"""The transaction coordinator: the logic of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, DescribeTransactions, ListTransactions and KIP-890's verification, for the transactional
ids whose ``__transaction_state`` partition this broker leads.

Error codes follow Kafka's TransactionCoordinator (version-specific mapping, e.g. PRODUCER_FENCED
to INVALID_PRODUCER_EPOCH for old clients, is the API modules' business). A state change is
prepared (the id is then busy: CONCURRENT_TRANSACTIONS), written with acks=all, and applied only
once replicated. EndTxn's outcome is fixed once PrepareCommit/PrepareAbort is replicated; the markers and the
CompleteCommit/CompleteAbort record follow in a background task, which EndTxn waits for (bounded)
so that the producer's next transaction does not start against a busy id. Leadership of a state partition
brings its ids in (replayed, pending commits/aborts finished, coordinator epoch = leader epoch);
losing it drops them.
"""
import asyncio
import logging

from pybroker.coordinator.group import now_ms
from pybroker.protocol.errors import (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_EPOCH,
                                      INVALID_PRODUCER_ID_MAPPING, INVALID_REQUEST, INVALID_TRANSACTION_TIMEOUT,
                                      INVALID_TXN_STATE, NONE, NOT_COORDINATOR, PRODUCER_FENCED,
                                      TRANSACTIONAL_ID_NOT_FOUND, TRANSACTION_ABORTABLE)
from pybroker.transaction import records
from pybroker.transaction.markers import MarkerSender
from pybroker.transaction.metadata import (EXPIRABLE, NO_EPOCH, PREPARING, TransactionMetadata, Transit, TxnState,
                                           epoch_exhausted)
from pybroker.transaction.state_log import TOPIC, TransactionStateLog
from pybroker.transaction.verify import Verifier

log = logging.getLogger(__name__)

S = TxnState
_FOR_PRODUCERS = {PRODUCER_FENCED: INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE: INVALID_TXN_STATE}
WRITE_TIMEOUT_MS = 30000  # Kafka's request.timeout.ms for the state log's appends
RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0)
LOAD_YIELD_RECORDS = 1000
END_TXN_COMPLETION_WAIT_S = 5.0
MAX_ID_BYTES = 0x7fff  # the state log key is an INT16-length STRING; flexible requests can carry more


class TransactionCoordinator:
    def __init__(self, config, services):
        self.config = config
        self.services = services  # pybroker.services.Services: control, replicas, metadata, producer ids
        self.state_log = TransactionStateLog(config, services)
        self.markers = MarkerSender(services)
        self.verifier = Verifier(self)
        self.txns: dict[str, TransactionMetadata] = {}
        self.owned: dict[int, int] = {}  # state partition -> coordinator epoch (its leader epoch)
        self.loading: dict[int, object] = {}  # state partition -> the token of the load under way
        self._tasks: set[asyncio.Task] = set()
        self._timers: list[asyncio.Task] = []

    # ---- lifecycle ---------------------------------------------------------------------------

    def startup(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        self._timers = [
            loop.create_task(self._every(cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                                         self.abort_timed_out)),
            loop.create_task(self._every(cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
                                         self.remove_expired))]

    async def shutdown(self) -> None:
        for task in self._timers + list(self._tasks):
            task.cancel()
        self._timers, self.owned, self.loading = [], {}, {}
        await self.markers.close()
        await self.verifier.close()

    async def _every(self, interval_ms: int, work) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                work()
            except Exception:
                log.exception("transaction coordinator housekeeping failed")

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- leadership of __transaction_state ------------------------------------------------------

    def on_leadership(self, key, is_leader: bool) -> None:
        if key[0] != TOPIC:
            return
        index = key[1]
        record = self.services.control.topics.get(TOPIC)
        if record is not None:
            self.state_log.use(record)
        self._unload(index)
        if is_leader:
            partition = self.services.replicas.get(TOPIC, index)
            token = self.loading[index] = object()  # requests get COORDINATOR_LOAD_IN_PROGRESS until loaded
            self._spawn(self._load_logged(index, partition.leader_epoch if partition is not None else 0, token))

    async def _load_logged(self, index: int, coordinator_epoch: int, token) -> None:
        try:
            await self._load(index, coordinator_epoch, token)
        except Exception:  # the partition stays loading (clients retry) rather than serve a partial state
            log.exception("loading %s-%d failed", TOPIC, index)

    def _unload(self, index: int) -> None:
        self.loading.pop(index, None)
        if self.owned.pop(index, None) is None:
            return
        for tid in [t for t in self.txns if self.partition_for(t) == index]:
            del self.txns[tid]
        log.info("no longer the transaction coordinator of %s-%d", TOPIC, index)

    async def _load(self, index: int, coordinator_epoch: int, token) -> None:
        loaded: dict[str, records.TxnLogValue] = {}
        for count, (tid, value) in enumerate(self.state_log.replay(index), 1):
            if value is None:
                loaded.pop(tid, None)
            else:
                loaded[tid] = value
            if count % LOAD_YIELD_RECORDS == 0:
                await asyncio.sleep(0)  # a long replay must not stall every other request
                if self.loading.get(index) is not token:
                    return  # unloaded (or loaded again) meanwhile
        if self.loading.get(index) is not token:
            return
        del self.loading[index]
        self.owned[index] = coordinator_epoch
        for tid, v in loaded.items():
            try:
                state = TxnState.from_id(v.status)
            except ValueError as exc:
                log.warning("skipping transactional id %s: %s", tid, exc)
                continue
            md = self.txns[tid] = TransactionMetadata(
                tid, v.producer_id, v.producer_epoch, v.timeout_ms, state, set(v.partitions) if state != S.EMPTY
                else set(), v.start_ms, v.last_update_ms)
            if state in PREPARING:  # the markers of a decided transaction may be missing: send them again
                self._spawn(self._complete(md, coordinator_epoch, md.prepare_complete(now_ms())))
        log.info("transaction coordinator of %s-%d at epoch %d: loaded %d transactional ids",
                 TOPIC, index, coordinator_epoch, len(loaded))

    # ---- lookups -----------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return self.state_log.partition_for(transactional_id)

    def owns(self, transactional_id: str) -> bool:
        return self.partition_for(transactional_id) in self.owned

    def _lookup(self, transactional_id: str):
        """(error, metadata or None, coordinator epoch) as Kafka's getTransactionState."""
        index = self.partition_for(transactional_id)
        epoch = self.owned.get(index)
        if epoch is None:
            return (COORDINATOR_LOAD_IN_PROGRESS if index in self.loading else NOT_COORDINATOR), None, -1
        return NONE, self.txns.get(transactional_id), epoch

    def _still_current(self, md: TransactionMetadata, coordinator_epoch: int) -> bool:
        tid = md.transactional_id
        return self.owned.get(self.partition_for(tid)) == coordinator_epoch and self.txns.get(tid) is md

    # ---- writes ------------------------------------------------------------------------------

    async def _write(self, md: TransactionMetadata, t: Transit, coordinator_epoch: int) -> int:
        """Append the transit and apply it once replicated (Kafka's appendTransactionToLog)."""
        tid = md.transactional_id
        value = None if t.state == S.DEAD else records.encode_value(records.TxnLogValue(
            t.producer_id, t.producer_epoch, t.timeout_ms, t.state.id, tuple(sorted(t.partitions)),
            t.last_update_ms, t.start_ms), empty=t.state == S.EMPTY)
        try:
            error = await self.state_log.append(self.partition_for(tid), tid, value, WRITE_TIMEOUT_MS)
        except Exception:  # never leave the id busy: the client retries the request
            log.exception("writing %s of %s failed", t.state.label, tid)
            if md.pending == t.state:
                md.abandon()
            raise
        if not self._still_current(md, coordinator_epoch):
            return NOT_COORDINATOR  # the partition moved (or was reloaded) meanwhile: memory is not ours
        if md.pending != t.state:
            return CONCURRENT_TRANSACTIONS
        if error:
            md.abandon()
            return error
        md.complete(t)
        if t.state == S.DEAD:
            del self.txns[tid]
        return NONE

    # ---- InitProducerId ----------------------------------------------------------------------

    def valid_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.transaction_max_timeout_ms

    async def init_producer_id(self, tid: str, timeout_ms: int, expected) -> tuple[int, int, int]:
        """(error, producer id, epoch); ``expected`` is (producer id, epoch) from v3+ or None."""
        if tid == "" or len(tid.encode("utf-8")) > MAX_ID_BYTES:
            return INVALID_REQUEST, -1, -1
        if not self.valid_timeout(timeout_ms):
            return INVALID_TRANSACTION_TIMEOUT, -1, -1
        error, md, coordinator_epoch = self._lookup(tid)
        if error:
            return error, -1, -1
        if md is None:
            pid = await self.services.control.allocate_producer_id()
            error, md, coordinator_epoch = self._lookup(tid)
            if error:
                return error, -1, -1
            if md is None:
                md = self.txns[tid] = TransactionMetadata(tid, pid, NO_EPOCH, timeout_ms, S.EMPTY,
                                                          last_update_ms=now_ms())
        new_pid = None
        if self._needs_new_producer_id(md, expected):
            new_pid = await self.services.control.allocate_producer_id()
            if not self._still_current(md, coordinator_epoch):
                return NOT_COORDINATOR, -1, -1
        result = self._prepare_init(md, timeout_ms, expected, new_pid)
        if isinstance(result, int):
            return result, -1, -1
        if result.state == S.PREPARE_EPOCH_FENCE:  # abort the ongoing transaction first; the client retries
            prepared = self._prepare_end(md, result.producer_id, result.producer_epoch, False, from_client=False)
            error = prepared if isinstance(prepared, int) else await self._finish_end(md, coordinator_epoch, *prepared)
            return (error or CONCURRENT_TRANSACTIONS), -1, -1
        error = await self._write(md, result, coordinator_epoch)
        if error:
            return error, -1, -1
        log.info("initialized transactional id %s: producer id %d, epoch %d", tid, result.producer_id,
                 result.producer_epoch)
        return NONE, result.producer_id, result.producer_epoch

    @staticmethod
    def _needs_new_producer_id(md: TransactionMetadata, expected) -> bool:
        return (md.state in EXPIRABLE and epoch_exhausted(md.producer_epoch)
                and (expected is None or expected[1] == md.producer_epoch))

    def _prepare_init(self, md: TransactionMetadata, timeout_ms: int, expected, new_pid):
        if md.in_transition:
            return CONCURRENT_TRANSACTIONS
        if expected is not None and not (
                md.producer_epoch == NO_EPOCH or expected[0] == md.producer_id
                or (expected[0] == md.last_producer_id and epoch_exhausted(expected[1]))):
            return PRODUCER_FENCED
        if md.state in PREPARING:
            return CONCURRENT_TRANSACTIONS
        if md.state == S.ONGOING:
            return md.prepare_fence_epoch()
        if md.state in EXPIRABLE:
            if self._needs_new_producer_id(md, expected):
                if new_pid is None:
                    return CONCURRENT_TRANSACTIONS  # the state changed while an id was allocated: retry
                return md.prepare_producer_id_rotation(new_pid, timeout_ms, now_ms(), expected is not None)
            return md.prepare_increment_epoch(timeout_ms, None if expected is None else expected[1], now_ms())
        log.error("transactional id %s found in state %s", md.transactional_id, md.state.label)
        return CONCURRENT_TRANSACTIONS

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    async def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions) -> int:
        if not tid:
            return INVALID_REQUEST
        error, md, coordinator_epoch = self._lookup(tid)
        if error:
            return error
        if md is None or md.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != epoch:
            return PRODUCER_FENCED
        if md.in_transition or md.state in PREPARING:
            return CONCURRENT_TRANSACTIONS
        partitions = set(partitions)
        if md.state == S.ONGOING and partitions <= md.partitions:
            return NONE
        return await self._write(md, md.prepare_add_partitions(partitions, now_ms()), coordinator_epoch)

    def verify_local(self, tid: str, producer_id: int, epoch: int, partitions) -> dict:
        """KIP-890: is each partition in the ongoing transaction? {(topic, partition): error}."""
        error = NONE
        if not tid:
            error = INVALID_REQUEST
        else:
            error, md, _ = self._lookup(tid)
            if not error:
                if md is None or md.producer_id != producer_id:
                    error = INVALID_PRODUCER_ID_MAPPING
                elif md.producer_epoch != epoch:
                    error = PRODUCER_FENCED
                elif md.state in PREPARING:
                    error = CONCURRENT_TRANSACTIONS
                else:
                    return {tp: NONE if tp in md.partitions else TRANSACTION_ABORTABLE for tp in partitions}
        return {tp: error for tp in partitions}

    async def verify(self, tid: str, producer_id: int, epoch: int, partitions) -> dict:
        """The check a partition leader makes before a transactional producer's first batch, in the
        codes a producer expects there (Kafka's AddPartitionsToTxnManager): a fenced producer gets
        INVALID_PRODUCER_EPOCH, a partition not in the transaction INVALID_TXN_STATE."""
        record = self.services.control.topics.get(TOPIC)
        if record is not None:
            self.state_log.use(record)  # a broker that never led a state partition learns the count here
        if not tid or self.owns(tid):
            errors = self.verify_local(tid, producer_id, epoch, partitions)
        else:
            errors = await self.verifier.remote(tid, producer_id, epoch, partitions)
        return {tp: _FOR_PRODUCERS.get(code, code) for tp, code in errors.items()}

    # ---- EndTxn ------------------------------------------------------------------------------

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> int:
        if not tid:
            return INVALID_REQUEST
        error, md, coordinator_epoch = self._lookup(tid)
        if error:
            return error
        if md is None:
            return INVALID_PRODUCER_ID_MAPPING
        prepared = self._prepare_end(md, producer_id, epoch, commit, from_client=True)
        if isinstance(prepared, int):
            return prepared
        return await self._finish_end(md, coordinator_epoch, *prepared)

    def _prepare_end(self, md: TransactionMetadata, producer_id: int, epoch: int, commit: bool, from_client: bool):
        """The PrepareCommit/PrepareAbort transit, or an error code (0: already done, as Kafka answers)."""
        fencing = md.pending == S.PREPARE_EPOCH_FENCE
        if md.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if (from_client and epoch != md.producer_epoch) or epoch < md.producer_epoch:
            return PRODUCER_FENCED
        if md.in_transition and not fencing:
            return CONCURRENT_TRANSACTIONS
        state = md.state
        if state == S.ONGOING:
            if fencing:  # the fence's bumped epoch goes into the PrepareAbort record
                md.abandon()
                md.producer_epoch, md.last_producer_epoch = epoch, NO_EPOCH
            return md.prepare_abort_or_commit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms()), fencing
        if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return NONE if (state == S.COMPLETE_COMMIT) == commit else INVALID_TXN_STATE
        if state in PREPARING:
            return CONCURRENT_TRANSACTIONS if (state == S.PREPARE_COMMIT) == commit else INVALID_TXN_STATE
        return INVALID_TXN_STATE

    async def _finish_end(self, md: TransactionMetadata, coordinator_epoch: int, transit: Transit,
                          fencing: bool) -> int:
        error = await self._write(md, transit, coordinator_epoch)
        if error:
            if fencing and self._still_current(md, coordinator_epoch):
                md.failed_epoch_fence = True  # the bumped epoch was never returned: the next fence reuses it
            return error
        completion = self._spawn(self._complete(md, coordinator_epoch, md.prepare_complete(now_ms())))
        # the outcome is decided; waiting a little for the markers spares the client's next
        # AddPartitionsToTxn a CONCURRENT_TRANSACTIONS retry (a slow marker keeps going in the background)
        await asyncio.wait({completion}, timeout=END_TXN_COMPLETION_WAIT_S)
        return NONE

    async def _complete(self, md: TransactionMetadata, coordinator_epoch: int, done: Transit) -> None:
        """Markers to every partition, then CompleteCommit/CompleteAbort (retried while still ours)."""
        commit = md.state == S.PREPARE_COMMIT
        if not await self.markers.send(md.producer_id, md.producer_epoch, coordinator_epoch, commit,
                                       sorted(md.partitions), lambda: self._still_current(md, coordinator_epoch),
                                       md.partitions.discard):
            return
        for attempt in range(1 << 30):
            error = await self._write(md, done, coordinator_epoch)
            if not error or error == NOT_COORDINATOR or not self._still_current(md, coordinator_epoch):
                return
            log.warning("writing %s of %s failed (error %d); retrying", done.state.label, md.transactional_id, error)
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            if md.in_transition or md.state not in PREPARING:
                return
            done = md.prepare_complete(now_ms())

    # ---- housekeeping --------------------------------------------------------------------------

    def abort_timed_out(self) -> int:
        """Abort (fencing the producer) every Ongoing transaction older than its timeout."""
        now, count = now_ms(), 0
        for md in list(self.txns.values()):
            if md.state != S.ONGOING or md.in_transition or md.start_ms + md.timeout_ms > now:
                continue
            try:
                fence = md.prepare_fence_epoch()
            except RuntimeError as exc:
                log.error("cannot abort the timed-out transaction of %s: %s", md.transactional_id, exc)
                continue
            prepared = self._prepare_end(md, md.producer_id, fence.producer_epoch, False, from_client=False)
            if isinstance(prepared, int):
                md.abandon()
                continue
            log.info("aborting the transaction of %s (producer id %d): older than its timeout of %d ms",
                     md.transactional_id, md.producer_id, md.timeout_ms)
            self._spawn(self._finish_end(md, self.owned[self.partition_for(md.transactional_id)], *prepared))
            count += 1
        return count

    def remove_expired(self) -> int:
        """Tombstone transactional ids idle for transactional.id.expiration.ms."""
        now, count = now_ms(), 0
        for md in list(self.txns.values()):
            if (md.state in EXPIRABLE and not md.in_transition
                    and md.last_update_ms + self.config.transactional_id_expiration_ms <= now):
                epoch = self.owned[self.partition_for(md.transactional_id)]
                self._spawn(self._write(md, md.prepare_dead(), epoch))
                count += 1
        return count

    # ---- reads -------------------------------------------------------------------------------

    def describe(self, tid: str):
        """(error, TransactionMetadata or None)."""
        if not tid:
            return INVALID_REQUEST, None
        error, md, _ = self._lookup(tid)
        if error:
            return error, None
        if md is None or md.state == S.DEAD:
            return TRANSACTIONAL_ID_NOT_FOUND, None
        return NONE, md

    def list(self, states: set, producer_ids: set, min_duration_ms: int):
        """(error, transactions of the owned partitions that pass the filters, the unknown state
        names), Kafka's rules: the duration filter keeps what started more than ``min_duration_ms``
        ago; nothing is listed while a partition loads."""
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS, [], []
        known = {s.label for s in TxnState}
        unknown = sorted(set(states) - known)
        now = now_ms()
        out = []
        for md in self.txns.values():
            if md.state == S.DEAD or (producer_ids and md.producer_id not in producer_ids):
                continue
            if states and md.state.label not in states:
                continue
            if min_duration_ms >= 0 and now - md.start_ms <= min_duration_ms:
                continue
            out.append(md)
        return NONE, out, unknown
