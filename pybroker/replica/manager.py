"""The partitions this broker hosts: role changes, appends with acks, fetches with long polling.

Interface kept narrow (dicts keyed by (topic, partition) in, typed results out) so the
partitions can later be sharded over worker processes behind the same calls.

acks=all: a produce waits in a purgatory keyed by partition until the high watermark passes its
last offset (completed when the HW moves, never polled), the request's timeout (REQUEST_TIMED_OUT),
or the loss of leadership (NOT_LEADER_OR_FOLLOWER).

Transaction markers (``write_txn_markers``) are appended by the leader like acks=all produces and
answered once the high watermark passes them; ``marker_listeners`` hear of each one as it is appended.
"""
import asyncio
import logging
import time
from dataclasses import dataclass

from pybroker.errors import BrokerError, OffsetOutOfRangeError
from pybroker.log.log import now_ms
from pybroker.log import partition_metadata
from pybroker.protocol.errors import (INCONSISTENT_TOPIC_ID, KAFKA_STORAGE_ERROR, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                      NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, STALE_CONTROLLER_EPOCH,
                                      UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.replica import legacy_offsets
from pybroker.replica.partition import NotLeaderOrFollowerError, Partition, ProduceResult, monotonic_ms
from pybroker.replica.producer_state import VERIFY_NOT_NEEDED
from pybroker.replica.throttle import ReplicationQuota, is_throttled

log = logging.getLogger(__name__)

CONSUMER_ID = -1  # Fetch/ListOffsets replica id of a client
DEBUGGING_CONSUMER_ID = -2  # Fetch replica id of a debugging consumer: reads any replica


@dataclass
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    topic_id: object = None  # read by a fetch by topic id (Fetch v13+): the log's id must match


@dataclass
class FetchResult:
    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: object = None  # a FetchSlice, or None
    aborted_transactions: list | None = None  # read_committed: (producer id, first offset) pairs
    diverging_epoch: tuple | None = None  # (epoch, end offset) where the fetcher's log diverged (Fetch v12+)
    current_leader: tuple | None = None  # (leader id, leader epoch) on NOT_LEADER/FENCED (KIP-951)


@dataclass
class ProduceOutcome:
    error: int
    result: ProduceResult | None = None
    message: str | None = None
    record_errors: tuple = ()  # (batch index, message) of the records that made the batch refused (KIP-467)


def errored(code: int, partition, replica_id: int) -> FetchResult:
    """A partition's failed read. A consumer gets -1 offsets, as from Kafka; a follower gets the leader's
    (its log start is where an out-of-range follower starts again, without asking ListOffsets)."""
    if replica_id >= 0:
        return FetchResult(code, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset)
    return FetchResult(code)


def error_code(exc: Exception) -> int:
    return exc.code if isinstance(exc, BrokerError) else UNKNOWN_SERVER_ERROR


async def no_isr_change(partition, new_isr) -> bool:
    """The ISR writer until the control's is set: nothing changes."""
    return False


class ReplicaManager:
    """``fetchers``: the ReplicaFetcherManager that follows leaders elsewhere (a cluster of one has
    no followers, so it stays idle); ``isr_writer``: async (partition, new_isr) -> bool, the
    control's ``write_isr``."""

    def __init__(self, node_id: int, log_manager, fetchers, replica_lag_time_max_ms: int = 30000,
                 leader_quota: ReplicationQuota | None = None, isr_writer=no_isr_change):
        self.node_id = node_id
        self.log_manager = log_manager
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.controller_epoch = 0
        self.fetchers = fetchers
        if fetchers is not None:
            fetchers.on_follower_high_watermark = self.follower_high_watermark_moved
        self.isr_writer = isr_writer
        # leader.replication.throttled.rate (unlimited by default)
        self.leader_quota = leader_quota if leader_quota is not None else ReplicationQuota()
        self.listeners = []        # objects with on_leadership(key, is_leader) (the group coordinator)
        # callables (topic, partition, producer_id, commit, marker_offset): a marker was appended as leader
        self.marker_listeners = []
        self._waiters: list[tuple[set, asyncio.Future]] = []  # long-polling fetches
        self._acks: dict[tuple[str, int], list] = {}  # acks=all produces: key -> [(offset, future)]
        self._stopping = False  # shutting down: fetches answer at once instead of long polling
        self._isr_task = None

    # ---- partitions -----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def get_leader(self, topic: str, partition: int) -> Partition | None:
        p = self.partitions.get((topic, partition))
        return p if p is not None and p.is_leader else None

    def _open(self, state, topic_id, log_config) -> Partition:
        key = (state.topic, state.partition)
        p = self.partitions.get(key)
        if p is None:
            lg = self.log_manager.get_or_create_log(state.topic, state.partition, log_config)
            if log_config is not None and lg.config != log_config:  # recovered at start with the broker's defaults
                lg.update_config(log_config)
            # a directory of another incarnation of the topic is refused (INCONSISTENT_TOPIC_ID)
            topic_id = partition_metadata.check_or_assign(lg.directory, topic_id) or topic_id
            hw = self.log_manager.loaded_high_watermarks.get(key)
            p = self.partitions[key] = Partition(state.topic, state.partition, topic_id, lg, self.node_id,
                                                 -1, tuple(state.replicas), high_watermark=hw)
        return p

    def apply_states(self, controller_epoch: int, states, topic_ids: dict, log_config_for, leaders: dict) -> dict:
        """LeaderAndIsr: become leader or follower of each partition; ``leaders`` maps broker id to
        (host, port). Returns {(topic, partition): error}."""
        if controller_epoch < self.controller_epoch:
            return {(s.topic, s.partition): STALE_CONTROLLER_EPOCH for s in states}
        self.controller_epoch = controller_epoch
        errors, became_leader, became_follower, roles = {}, [], [], []
        for s in states:
            key = (s.topic, s.partition)
            if self.node_id not in s.replicas:
                errors[key] = UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                p = self._open(s, topic_ids.get(s.topic), log_config_for(s.topic))
                was_leader, old_leader, old_epoch = p.is_leader, p.leader_id, p.leader_epoch
                roles.append((p, was_leader))
                if s.leader == self.node_id:
                    if p.make_leader(s) and not (was_leader and old_epoch == s.leader_epoch):
                        became_leader.append(p)  # a repeat of what we already are changes nothing
                elif p.make_follower(s) and (old_leader, old_epoch) != (s.leader, s.leader_epoch):
                    became_follower.append(p)
                    if was_leader:
                        self._fail_acks(key)
                errors[key] = 0
            except Exception as exc:  # one bad partition must not stop the others
                log.exception("cannot apply the state of %s-%d", *key)
                errors[key] = error_code(exc)
        self.fetchers.remove([(p.topic, p.index) for p in became_leader])
        self.fetchers.add([p for p in became_follower if p.leader_id >= 0], leaders)
        for p in became_leader + became_follower:
            self._wake({(p.topic, p.index)})
        for p, was_leader in roles:
            if p.is_leader != was_leader:  # the group coordinator moves only with a real change of role
                for listener in self.listeners:
                    listener.on_leadership((p.topic, p.index), p.is_leader)
        return errors

    def stop_replica(self, topic: str, partition: int, delete: bool) -> None:
        key = (topic, partition)
        self.fetchers.remove([key])
        p = self.partitions.get(key)
        if p is not None:
            self._fail_acks(key)
            for listener in self.listeners:
                listener.on_leadership(key, False)
        if delete:
            self.delete_partition(topic, partition)
        elif p is not None:
            p.resign()

    def resign_all(self) -> None:
        """The ZooKeeper session is gone: acknowledge nothing as leader until the controller says so."""
        for key, p in self.partitions.items():
            if p.is_leader:
                p.resign()
                self._fail_acks(key)
                for listener in self.listeners:
                    listener.on_leadership(key, False)

    def delete_partition(self, topic: str, partition: int) -> None:
        self.partitions.pop((topic, partition), None)
        self.log_manager.delete_log(topic, partition)
        self._wake({(topic, partition)})  # fetches waiting on it answer now, as Kafka's delayed fetches

    def high_watermark_of(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark (None when it is not hosted here); any thread may ask."""
        p = self.partitions.get((topic, partition))
        return None if p is None else p.high_watermark

    def start(self) -> None:
        self._isr_task = asyncio.get_running_loop().create_task(self._maintain_isr_forever())

    def shutdown(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
        for p in self.partitions.values():
            self.log_manager.high_watermarks[(p.topic, p.index)] = p.high_watermark
            p.close()

    # ---- produce --------------------------------------------------------------------------

    def append(self, required_acks: int, entries: dict, verification=None) -> dict[tuple[str, int], ProduceOutcome]:
        """Append each partition's records; one partition's failure does not affect the others.

        ``verification``: a dict key -> guard from ``start_verification`` (KIP-890), or one value for
        every partition: None (nobody asked the coordinator) or partition.NO_TRANSACTIONAL_ID.
        """
        per_key = type(verification) is dict
        out = {}
        appended = set()
        for key, records in entries.items():
            partition = self.partitions.get(key)
            if partition is None:
                out[key] = ProduceOutcome(UNKNOWN_TOPIC_OR_PARTITION)
                continue
            try:
                result = partition.append_as_leader(records, required_acks,
                                                    verification.get(key) if per_key else verification)
            except BrokerError as exc:
                out[key] = ProduceOutcome(exc.code, message=str(exc), record_errors=getattr(exc, "record_errors", ()))
                continue
            except Exception as exc:  # never let one partition take the request down
                log.exception("append to %s-%d failed", *key)
                out[key] = ProduceOutcome(UNKNOWN_SERVER_ERROR, message=str(exc))
                continue
            out[key] = ProduceOutcome(0, result)
            appended.add(key)
        if appended:
            self._wake(appended)
        return out

    def start_verification(self, keys, producer_id: int) -> tuple[dict, list]:
        """KIP-890: (key -> guard for every led partition, the keys the coordinator must be asked about)."""
        guards, ask = {}, []
        for key in keys:
            p = self.partitions.get(key)
            if p is None or not p.is_leader:
                continue  # the append answers the error
            guard = p.start_verification(producer_id)
            guards[key] = guard
            if guard is not VERIFY_NOT_NEEDED:
                ask.append(key)
        return guards, ask

    # ---- transaction markers --------------------------------------------------------------

    async def write_txn_markers(self, markers, timeout_ms: int) -> dict:
        """Append each TxnMarker's control batch to its partitions as leader and wait until the high
        watermark passes it; {(producer_id, topic, partition): error} (Kafka's WriteTxnMarkers codes)."""
        errors, waits, flushes = {}, {}, {}
        now = now_ms()
        for m in markers:
            for topic, index in m.partitions:
                key = (m.producer_id, topic, index)
                p = self.partitions.get((topic, index))
                if p is None:
                    errors[key] = UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:
                    result = p.append_marker(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch, now)
                except BrokerError as exc:
                    errors[key] = exc.code
                    continue
                except Exception:
                    log.exception("marker for producer %d on %s-%d failed", m.producer_id, topic, index)
                    errors[key] = UNKNOWN_SERVER_ERROR
                    continue
                errors[key] = 0
                self._wake({(topic, index)})
                for listener in self.marker_listeners:
                    try:
                        listener(topic, index, m.producer_id, m.commit, result.offset)
                    except Exception:
                        log.exception("marker listener failed on %s-%d", topic, index)
                if result.flushed is not None:  # flush.messages reached: answered once it is on disk
                    flushes[key] = result.flushed
                if p.high_watermark <= result.offset:
                    waits.setdefault((topic, index), []).append((key, result.offset + 1))
        for key, done in flushes.items():
            try:
                await asyncio.wrap_future(done)
            except Exception:
                log.exception("flush after the marker for producer %d on %s-%d failed", *key)
                errors[key] = KAFKA_STORAGE_ERROR
        if waits:
            acked = await self._wait_for_markers(waits, timeout_ms)
            errors.update((key, code) for key, code in acked.items() if not errors.get(key))
        return errors

    async def _wait_for_markers(self, waits: dict, timeout_ms: int) -> dict:
        """Several markers may wait on one partition: wait for each partition's last, answer each marker."""
        codes = await self.wait_for_acks({tp: max(o for _, o in ks) for tp, ks in waits.items()}, timeout_ms)
        return {key: codes[tp] for tp, ks in waits.items() for key, _ in ks}

    def pending_acks(self, outcomes: dict) -> dict:
        """Of appended outcomes, those whose records the high watermark does not cover yet."""
        waits = {}
        for key, o in outcomes.items():
            if o.error == 0 and o.result is not None:
                p = self.partitions.get(key)
                if p is not None and p.high_watermark <= o.result.last_offset:
                    waits[key] = o.result.last_offset + 1
        return waits

    async def wait_for_acks(self, waits: dict, timeout_ms: int) -> dict:
        """Wait until every partition's HW reaches its offset; {key: error} (0, REQUEST_TIMED_OUT,
        NOT_LEADER_OR_FOLLOWER or NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        if self._stopping:
            return {key: NOT_LEADER_OR_FOLLOWER for key in waits}
        loop = asyncio.get_running_loop()
        futures = {}
        for key, offset in waits.items():
            fut = loop.create_future()
            self._acks.setdefault(key, []).append((offset, fut))
            futures[key] = fut
        if futures:
            await asyncio.wait(futures.values(), timeout=max(timeout_ms, 0) / 1000)
        errors = {}
        for key, fut in futures.items():
            if fut.done():
                errors[key] = fut.result()
            else:
                fut.cancel()
                errors[key] = REQUEST_TIMED_OUT
                waiting = self._acks.get(key)
                if waiting:
                    self._acks[key] = [w for w in waiting if w[1] is not fut]
        return errors

    def _complete_acks(self, p: Partition) -> None:
        key = (p.topic, p.index)
        waiting = self._acks.get(key)
        if not waiting:
            return
        keep = []
        too_few = len(p.isr) < p.min_isr  # the HW cannot pass these records until the ISR grows back
        for offset, fut in waiting:
            if fut.done():
                continue
            if too_few:
                fut.set_result(NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            elif offset <= p.high_watermark:
                fut.set_result(0)
            else:
                keep.append((offset, fut))
        if keep:
            self._acks[key] = keep
        else:
            del self._acks[key]

    def _fail_acks(self, key) -> None:
        for _, fut in self._acks.pop(key, ()):
            if not fut.done():
                fut.set_result(NOT_LEADER_OR_FOLLOWER)

    def high_watermark_moved(self, p: Partition) -> None:
        self._complete_acks(p)
        self._wake({(p.topic, p.index)})

    def follower_high_watermark_moved(self, key: tuple) -> None:
        """Consumers waiting on a follower's copy (KIP-392) may read what the leader committed."""
        if self._waiters:
            self._wake({key})

    # ---- fetch ----------------------------------------------------------------------------

    async def fetch(self, requests: list[FetchRequestPartition], max_wait_ms: int, min_bytes: int,
                    max_bytes: int, committed_only: bool, replica_id: int = -1,
                    by_id: bool = False, leader_only: bool = True) -> list[FetchResult]:
        """Read every partition; wait up to ``max_wait_ms`` for ``min_bytes`` unless an error is due.
        ``by_id``: the requests name topics by id (``.topic_id``), checked against each log's id at
        every read, so a topic recreated under the same name while the fetch waits answers
        INCONSISTENT_TOPIC_ID, never the new topic's records. ``leader_only`` False: a consumer
        may read a follower's copy up to its high watermark (Fetch v11+, KIP-392)."""
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        keys = {(r.topic, r.partition) for r in requests}
        while True:
            if replica_id >= 0:
                results, total = self.read_for_follower(replica_id, requests, max_bytes, by_id)
            elif replica_id == DEBUGGING_CONSUMER_ID:
                results, total = self.read_for_debugging(requests, max_bytes, by_id)
            else:
                results, total = self.read(requests, max_bytes, committed_only, by_id, leader_only)
            remaining = deadline - time.monotonic()
            if total >= min_bytes or remaining <= 0 or self._stopping or any(r.error for r in results):
                return results
            await self.wait_for_change(keys, remaining)

    def read(self, requests: list[FetchRequestPartition], max_bytes: int, committed_only: bool, by_id: bool = False,
             leader_only: bool = True):
        """A consumer's fetch, one pass as Kafka: the first batch found may exceed max_bytes.
        read_committed: up to the LSO, with the aborted transactions in what is returned."""
        check = Partition.check_leader if leader_only else Partition.check_leader_epoch

        def one(p, req, budget, total):
            check(p, req.current_leader_epoch)
            return p.read(req.fetch_offset, budget, committed_only, min_one_batch=total == 0)
        results, total = self._read_each(requests, max_bytes, one, by_id)
        if committed_only:
            partitions = self.partitions
            for req, r in zip(requests, results):
                if r.records is not None:
                    p = partitions[(req.topic, req.partition)]
                    if p.log.any_aborted_txn is not False:  # a log that never aborted anything: no walk
                        r.aborted_transactions = p.aborted_transactions(req.fetch_offset)
        return results, total

    def read_for_follower(self, replica_id: int, requests: list[FetchRequestPartition], max_bytes: int,
                          by_id: bool = False):
        """A follower's fetch: its fetch offset is its log end; reads go up to our log end."""
        now = monotonic_ms()

        def one(p, req, budget, total):
            p.check_leader(req.current_leader_epoch)
            if replica_id not in p.replicas:
                raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {req.topic}-{req.partition}")
            throttled = self._leader_throttled(p, replica_id)
            if throttled and self.leader_quota.exceeded():
                records = None  # over the rate: this follower gets nothing of it for now
            else:
                records = p.read_for_follower(req.fetch_offset, budget)
                if throttled:
                    self.leader_quota.record(records.length)
            if p.update_follower(replica_id, req.fetch_offset, now):
                self.high_watermark_moved(p)
            self._maybe_expand_isr(p, replica_id)
            return records
        return self._read_each(requests, max_bytes, one, by_id, replica_id)

    def _leader_throttled(self, p: Partition, replica_id: int) -> bool:
        """Kafka's rule: a throttled partition's out-of-sync follower, while a rate is set."""
        return (self.leader_quota.limited and replica_id not in p.isr
                and is_throttled(p.log.config.leader_replication_throttled_replicas, p.index, self.node_id))

    def read_for_debugging(self, requests: list[FetchRequestPartition], max_bytes: int, by_id: bool = False):
        """Kafka's debugging consumer (replica id -2, e.g. ``pybroker verify-replicas``): any replica,
        leader or follower, read up to its own log end, with its own HW; no follower state moves."""
        def one(p, req, budget, total):
            p.check_leader_epoch(req.current_leader_epoch)
            # at least one batch, as for followers: an empty answer always means "at the log end"
            return p.log.read(req.fetch_offset, budget, max_offset=None, min_one_batch=True)
        return self._read_each(requests, max_bytes, one, by_id)

    def _read_each(self, requests: list[FetchRequestPartition], max_bytes: int, read_one, by_id: bool = False,
                   replica_id: int = -1):
        """(results, bytes) of ``read_one(partition, request, budget, bytes so far)`` over the requests;
        ``by_id``: a partition whose log has another topic id than the request's is not read."""
        results, total = [], 0
        for req in requests:
            p = self.partitions.get((req.topic, req.partition))
            if p is None:
                results.append(FetchResult(UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if by_id:
                log_id, wanted_id = p.topic_id, req.topic_id
                # as Kafka: a log or a request without an id is consistent with any
                if log_id is not wanted_id and log_id is not None and wanted_id is not None \
                        and log_id.int != wanted_id.int and log_id.int and wanted_id.int:
                    results.append(FetchResult(INCONSISTENT_TOPIC_ID))
                    continue
            try:
                records = read_one(p, req, min(req.max_bytes, max(max_bytes - total, 0)), total)
            except BrokerError as exc:
                if isinstance(exc, OffsetOutOfRangeError):
                    log.info("%s-%d: a fetch at %s", req.topic, req.partition, exc)
                results.append(errored(exc.code, p, replica_id))
                continue
            length = records.length if records is not None else 0
            total += length
            results.append(FetchResult(0, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                                       records if length else None))
        return results, total

    async def wait_for_change(self, keys: set, timeout_s: float) -> None:
        """Park until the high watermark of one of ``keys`` moves, the timeout passes or the broker stops
        (share-partition leaders waiting for records to hand out)."""
        if self._stopping or timeout_s <= 0:
            return
        future = asyncio.get_running_loop().create_future()
        waiter = (keys, future)
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def stop_waiting(self) -> None:
        """Shutdown: answer every long-polling fetch now, so a clean stop never waits out max_wait_ms."""
        self._stopping = True
        for _, future in list(self._waiters):
            if not future.done():
                future.set_result(None)
        for key in list(self._acks):  # the followers stop fetching from us: producers retry elsewhere
            self._fail_acks(key)

    def _wake(self, keys: set) -> None:
        for waiting, future in list(self._waiters):
            if not future.done() and waiting & keys:
                future.set_result(None)

    # ---- ISR --------------------------------------------------------------------------------

    def _maybe_expand_isr(self, p: Partition, replica_id: int) -> None:
        if p.isr_change_in_flight:
            return
        if p.should_join_isr(replica_id):
            self._change_isr(p, tuple(r for r in p.replicas if r in p.isr or r == replica_id))

    def _change_isr(self, p: Partition, new_isr: tuple) -> None:
        p.isr_change_in_flight = True

        async def write():
            try:
                if await self.isr_writer(p, new_isr):
                    p.maybe_increment_high_watermark()  # a smaller ISR may let it move
                    self.high_watermark_moved(p)
            except Exception:
                log.exception("ISR change of %s-%d failed", p.topic, p.index)
            finally:
                p.isr_change_in_flight = False
        asyncio.get_running_loop().create_task(write())

    def maybe_shrink_isr(self) -> None:
        now = monotonic_ms()
        for p in list(self.partitions.values()):
            if not p.is_leader or p.isr_change_in_flight:
                continue
            out = p.isr_to_shrink(now, self.replica_lag_time_max_ms)
            if out:
                log.info("%s-%d: shrinking the ISR %s: %s lagging", p.topic, p.index, list(p.isr), list(out))
                self._change_isr(p, tuple(r for r in p.isr if r not in out))

    async def _maintain_isr_forever(self) -> None:
        while True:
            await asyncio.sleep(max(self.replica_lag_time_max_ms / 2000, 0.05))
            try:
                self.maybe_shrink_isr()
            except Exception:
                log.exception("ISR check failed")

    # ---- offsets --------------------------------------------------------------------------

    def list_offset(self, topic: str, partition: int, timestamp: int, current_leader_epoch: int,
                    committed_only: bool) -> tuple[int, int, int, int]:
        """(error, timestamp, offset, leader_epoch) for ListOffsets."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1
        try:
            p.check_leader(current_leader_epoch)
            offset, ts = p.offset_for_timestamp(timestamp, committed_only)
        except BrokerError as exc:
            return exc.code, -1, -1, -1
        return 0, ts, offset, p.leader_epoch if offset >= 0 else -1  # no record at or after the timestamp

    def legacy_list_offsets(self, topic: str, partition: int, timestamp: int, max_num_offsets: int,
                            replica_id: int) -> tuple[int, list[int]]:
        """(error, offsets) for ListOffsets v0: segment boundaries before ``timestamp``, newest first.
        A consumer (replica id -1) is capped at the high watermark; only a debugging consumer (-2) may
        ask a follower. No KIP-207 check: v0 predates it, as in Kafka."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return UNKNOWN_TOPIC_OR_PARTITION, []
        if replica_id != DEBUGGING_CONSUMER_ID and not p.is_leader:
            return NOT_LEADER_OR_FOLLOWER, []
        if max_num_offsets < 0:
            return UNKNOWN_SERVER_ERROR, []  # what Kafka answers: it fails sizing the list
        offsets = legacy_offsets.offsets_before(p.log, timestamp, max_num_offsets)
        if replica_id == CONSUMER_ID:
            offsets = legacy_offsets.cap_at_high_watermark(offsets, p.high_watermark)
        return 0, offsets

    def delete_records(self, topic: str, partition: int, offset: int) -> tuple[int, int]:
        """(error, low watermark) for DeleteRecords."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1
        if not p.is_leader:
            return NOT_LEADER_OR_FOLLOWER, -1
        try:
            return 0, p.delete_records(offset)
        except OffsetOutOfRangeError as exc:
            return exc.code, p.log_start_offset
