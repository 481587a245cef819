"""Produce: validate each partition's batches and append them; acks 0 (no reply), 1 and -1.

Transactional batches (attribute 0x10) need the request's transactional_id (else their partition
gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Kafka fails the whole request, but finding them there
would cost every plain produce a look at each batch) and one producer id across the request (else
INVALID_PRODUCER_ID_MAPPING). When this broker runs a transaction coordinator (and
``transaction.partition.verification.enable``), a partition where the producer has no open
transaction is first verified with it (KIP-890 part 1) and appended only if it
is in the transaction, under a guard that a marker written meanwhile voids.

Versions: v9+ are flexible (the native decoder reads both layouts); v10+ answers
NOT_LEADER_OR_FOLLOWER with the partition's current leader and the endpoints of those leaders
(KIP-951, pybroker/api/leader_hints.py); v11+ producers are told TRANSACTION_ABORTABLE where older
ones get INVALID_TXN_STATE (KIP-890). As Kafka, a partition this broker does not host but the
cluster has is NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION.

A batch refused for some of its records (KIP-467: keyless on a compacted topic, a timestamp out of
bounds) names them in v8+ ``record_errors`` with Kafka's batch-level ``error_message``; as Kafka,
other refusals carry no message, and those of the log (but the ones Kafka knows by name: corrupt,
too large, not hosted, storage) tell the partition's log start offset.
"""
import asyncio
import struct

from pybroker import legacy_records
from pybroker.api.hosting import not_hosted
from pybroker.api.leader_hints import LeaderHints
from pybroker.api.produce_response import ProduceResponse
from pybroker.contracts.kafka_codec import PartitionData, ProduceData, TopicData
from pybroker.errors import CorruptRecordError
from pybroker.protocol.errors import (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                                      CORRUPT_MESSAGE, INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING,
                                      INVALID_RECORD, INVALID_REQUEST, INVALID_REQUIRED_ACKS, INVALID_TXN_STATE,
                                      KAFKA_STORAGE_ERROR, MESSAGE_TOO_LARGE, NETWORK_EXCEPTION, NOT_COORDINATOR,
                                      NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER,
                                      PRODUCER_FENCED, RECORD_LIST_TOO_LARGE, REQUEST_TIMED_OUT,
                                      TOPIC_AUTHORIZATION_FAILED,
                                      TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTION_ABORTABLE,
                                      UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_COMPRESSION_TYPE)
from pybroker.protocol.messages import RESPONSES
from pybroker.replica.partition import NO_TRANSACTIONAL_ID
from pybroker.security import acl as A

API_KEY = 0
MIN_VERSION = 0  # v0-2 carry magic 0/1 message sets, stored up-converted to one v2 batch (as Kafka 3.x)
MAX_VERSION = 11
FIRST_RECORD_BATCH_VERSION = 3
FIRST_FLEXIBLE_VERSION = 9  # request header v2, compact fields, tagged fields
FIRST_LEADER_HINT_VERSION = 10  # KIP-951: current_leader and node_endpoints
FIRST_ABORTABLE_VERSION = 11  # KIP-890: the producer understands TRANSACTION_ABORTABLE

TRANSACTIONAL = 0x10
_PRODUCER = struct.Struct(">qhi")  # producer id @43, producer epoch @51, base sequence @53
BATCH_HEADER = 61  # bytes of a record batch before its records
# coordinator errors a producer might not retry: answered as NOT_ENOUGH_REPLICAS, which it does (as Kafka)
_RETRIABLE_VERIFY_ERRORS = {NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                            CONCURRENT_TRANSACTIONS}
# what Kafka's verification answers a producer with instead: PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH,
# TRANSACTION_ABORTABLE -> INVALID_TXN_STATE (what pre-KIP-890-part-2 clients understand)
_VERIFY_ERROR_FOR_PRODUCER = {PRODUCER_FENCED: INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE: INVALID_TXN_STATE}
ZSTD, FIRST_ZSTD_VERSION = 4, 7
_HEAD = struct.Struct(">qi")  # base offset, batch length
_I32 = struct.Struct(">i")
LOG_OVERHEAD = 12  # base offset + length
MIN_RECORD_OVERHEAD = 14  # Kafka's smallest (magic 0) record after the length field
MAGIC_END = 17  # bytes up to and including the magic byte

Response = RESPONSES[API_KEY]
# shared by every partition answer: the encoder only reads them, and no allocation per partition
_NO_RECORD_ERRORS = ()
_NO_LEADER = Response.LeaderIdAndEpoch()
# refusals of an append that Kafka answers without the log start offset (ReplicaManager's known exceptions)
_NO_LOG_START = frozenset({UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
                           CORRUPT_MESSAGE, KAFKA_STORAGE_ERROR, TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


class AcksZeroProduceFailed(Exception):
    """Raised to make the network layer close the connection (Kafka's closeConnection)."""


def handle(ctx, request):
    topics = _topics(request)
    acks = request.acks
    error = 0
    if acks not in (0, 1, -1):
        error = INVALID_REQUIRED_ACKS
    outcomes = {}
    appended = {}
    authz = ctx.services.authorizer
    if authz is not None:  # ACLs: WRITE on the transactional id, then on each topic
        error, topics_to_append = _authorize(ctx, authz, request, topics, error, outcomes)
    else:
        topics_to_append = topics
    if not error:
        entries = {}
        check = _check_records if ctx.version >= FIRST_RECORD_BATCH_VERSION else _check_message_set
        for topic in topics_to_append:
            for part in topic.partitions:
                key = (topic.name, part.index)
                refusal, records = check(ctx.version, part.records)
                if key in entries or key in outcomes:
                    outcomes[key] = (INVALID_REQUEST, None, "partition repeated in the request")
                    entries.pop(key, None)
                elif refusal is not None:
                    outcomes[key] = (refusal[0], None, None, *refusal[3:])  # as Kafka: the reason is not answered
                else:
                    entries[key] = records
        if request.transactional_id is not None:
            return _append_transactional(ctx, request, topics, entries, outcomes)
        appended = ctx.services.replicas.append(acks, entries, NO_TRANSACTIONAL_ID)
        for key, outcome in appended.items():
            outcomes[key] = (outcome.error, outcome.result, outcome.message, outcome.record_errors)
    return _finish(ctx, request, topics, entries if appended else {}, appended, outcomes, error)


def _finish(ctx, request, topics, entries, appended, outcomes, error):
    acks = request.acks
    metrics = ctx.services.metrics
    if metrics is not None:  # pybroker/metrics: plain-int counts per topic, rendered on scrape
        metrics.on_produce(topics, entries, outcomes, error)
    if acks == 0:
        failed = sorted(f"{t}-{p}: error {o[0]}" for (t, p), o in outcomes.items() if o[0]) or (
            [f"error {error}"] if error else [])
        if failed:  # as Kafka: no response to carry the error, so hang up and the client refreshes
            raise AcksZeroProduceFailed("acks=0 produce failed (" + ", ".join(failed[:5]) + ")")
        return None
    flushes = {key: o[1].flushed for key, o in outcomes.items() if o[1] is not None and o[1].flushed is not None}
    replication = ctx.services.replicas.pending_acks(appended) if acks == -1 and not error else None
    if flushes or replication:  # flush.messages reached (the fsync runs off the loop) or acks=all waits for the HW
        return _respond_later(ctx, request.timeout_ms, topics, outcomes, error, flushes, replication)
    return _response(ctx, topics, outcomes, error)


def _append_transactional(ctx, request, topics, entries, outcomes):
    """A request with a transactional_id: one producer for its transactional batches, verified with
    the coordinator when this broker has one."""
    # a batch shorter than its header is left to the log's validation (it reads no producer fields)
    keys = [key for key, records in entries.items() if len(records) >= BATCH_HEADER and records[22] & TRANSACTIONAL]
    if len({_PRODUCER.unpack_from(entries[key], 43)[:2] for key in keys}) > 1:
        outcomes.clear()  # one transaction, one producer: the whole request is refused
        return _finish(ctx, request, topics, {}, {}, outcomes, INVALID_PRODUCER_ID_MAPPING)
    if keys and ctx.services.transactions is not None \
            and getattr(ctx.services.config, "transaction_partition_verification_enable", True):
        return _verify_then_append(ctx, request, topics, entries, keys, outcomes)
    appended = ctx.services.replicas.append(request.acks, entries, verification={})
    for key, outcome in appended.items():
        outcomes[key] = (outcome.error, outcome.result, outcome.message, outcome.record_errors)
    return _finish(ctx, request, topics, entries if appended else {}, appended, outcomes, 0)


async def _verify_then_append(ctx, request, topics, entries, keys, outcomes):
    """KIP-890: ask the transaction coordinator about the partitions that would open a transaction."""
    pid, epoch, _ = _PRODUCER.unpack_from(entries[keys[0]], 43)
    replicas = ctx.services.replicas
    guards, ask = replicas.start_verification(keys, pid)
    if ask:
        try:
            errors = await ctx.services.transactions.verify(request.transactional_id, pid, epoch, ask)
        except Exception as exc:  # the coordinator cannot be reached: the producer retries
            errors = {key: NOT_ENOUGH_REPLICAS for key in ask}
            message = f"unable to verify the partition is in the transaction: {exc}"
        else:
            message = None
        for key in ask:
            code = errors.get(key, INVALID_TXN_STATE)
            code = _VERIFY_ERROR_FOR_PRODUCER.get(code, code)
            if code:
                if code == INVALID_TXN_STATE:
                    text = None  # as Kafka: the code alone says the partition is not in the transaction
                    if ctx.version >= FIRST_ABORTABLE_VERSION:  # what KIP-890 clients abort on
                        code = TRANSACTION_ABORTABLE
                elif code in _RETRIABLE_VERIFY_ERRORS:
                    code, text = NOT_ENOUGH_REPLICAS, message or f"unable to verify the partition (error {code})"
                else:
                    text = message
                outcomes[key] = (code, None, text)
                del entries[key]
    appended = replicas.append(request.acks, entries, verification=guards)
    for key, outcome in appended.items():
        outcomes[key] = (outcome.error, outcome.result, outcome.message, outcome.record_errors)
    response = _finish(ctx, request, topics, entries if appended else {}, appended, outcomes, 0)
    return await response if asyncio.iscoroutine(response) else response


async def _respond_later(ctx, timeout_ms, topics, outcomes, error, flushes, replication):
    for key, done in flushes.items():
        try:
            await asyncio.wrap_future(done)
        except Exception as exc:
            outcomes[key] = (KAFKA_STORAGE_ERROR, None, f"flush failed: {exc}")
    if replication:
        for key, code in (await ctx.services.replicas.wait_for_acks(replication, timeout_ms)).items():
            if code and outcomes[key][0] == 0:
                outcomes[key] = (code, None, _NOT_REPLICATED.get(code))
    return _response(ctx, topics, outcomes, error)


_NOT_REPLICATED = {REQUEST_TIMED_OUT: "the in-sync replicas did not acknowledge within the request timeout",
                   NOT_LEADER_OR_FOLLOWER: "leadership moved before the in-sync replicas acknowledged",
                   NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                       "written, but fewer in-sync replicas than min.insync.replicas acknowledged it"}


def _authorize(ctx, authz, request, topics, error, outcomes):
    """(request error, topics that may be written); denied topics' partitions get their outcome now."""
    if request.transactional_id is not None and error in (0, INVALID_REQUEST) \
            and not authz.allowed(ctx, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id):
        return TRANSACTIONAL_ID_AUTHORIZATION_FAILED, topics
    allowed = []
    for topic in topics:
        if authz.allowed(ctx, A.WRITE, A.TOPIC, topic.name):
            allowed.append(topic)
        else:
            for part in topic.partitions:
                outcomes[(topic.name, part.index)] = (TOPIC_AUTHORIZATION_FAILED, None, None)
    return error, allowed


def _response(ctx, topics, outcomes, error):
    responses = []
    hints = None
    for topic in topics:
        parts = []
        for part in topic.partitions:
            outcome = outcomes.get((topic.name, part.index)) or (error, None, None)
            code, result = outcome[0], outcome[1]
            if not code:  # the common answer, built with nothing else looked at
                parts.append(Response.PartitionProduceResponse(
                    index=part.index, error_code=0, base_offset=result.base_offset if result else -1,
                    log_append_time_ms=result.log_append_time if result else -1,
                    log_start_offset=result.log_start_offset if result else -1,
                    record_errors=_NO_RECORD_ERRORS, error_message=None, current_leader=_NO_LEADER))
                continue
            message, named = outcome[2], outcome[3:]
            leader = _NO_LEADER
            record_errors = _NO_RECORD_ERRORS
            log_start_offset = result.log_start_offset if result else -1
            if code:  # failures only
                if named:  # the log refused the batch: as Kafka, most refusals tell its log start offset
                    if named[0]:  # KIP-467: the records that made the batch refused
                        record_errors = [Response.BatchIndexAndErrorMessage(batch_index=i,
                                                                            batch_index_error_message=m)
                                         for i, m in named[0]]
                    else:  # as Kafka: only a refusal naming its records says why
                        message = None
                    if code not in _NO_LOG_START:
                        replica = ctx.services.replicas.get(topic.name, part.index)
                        log_start_offset = replica.log_start_offset if replica is not None else -1
                if code == UNKNOWN_TOPIC_OR_PARTITION:
                    code = not_hosted(ctx, topic.name, part.index)
                if code == NOT_LEADER_OR_FOLLOWER and ctx.version >= FIRST_LEADER_HINT_VERSION:
                    hints = hints or LeaderHints(ctx)
                    leader_id, epoch = hints.leader_of(topic.name, part.index)
                    leader = Response.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=epoch)
            parts.append(Response.PartitionProduceResponse(
                index=part.index, error_code=code,
                base_offset=result.base_offset if result else -1,
                log_append_time_ms=result.log_append_time if result else -1,
                log_start_offset=log_start_offset,
                record_errors=record_errors, error_message=message if code else None,
                current_leader=leader))
        responses.append(Response.TopicProduceResponse(name=topic.name, partition_responses=parts))
    endpoints = [Response.NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                 for e in hints.sorted_endpoints()] if hints else []
    return ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=endpoints)


def _topics(request) -> list:
    """v3+ arrive from the native decoder; v0-2 (message sets) from the generated codec."""
    if isinstance(request, ProduceData):
        return request.topics
    return [TopicData(t.name, [PartitionData(p.index, p.records) for p in t.partition_data])
            for t in request.topic_data]


def _check_message_set(version: int, records):
    """Produce v0-2: the message set (magic 0/1) as the one v2 batch the log takes, or Kafka's refusal."""
    if records is None:
        return (INVALID_RECORD, None, "null records"), None
    if len(records) >= MAGIC_END and records[MAGIC_END - 1] == 2:  # a v2 batch sent in an old request: as Kafka, taken
        return _check_records(version, records)
    try:
        return None, legacy_records.upconvert(records)
    except CorruptRecordError as exc:
        return (CORRUPT_MESSAGE, None, str(exc)), None


def _check_records(version: int, records):
    """Kafka's per-partition request checks (ProduceRequest.validateRecords over its batch
    iterator, and UnifiedLog's base-offset-0 rule for client batches): exactly one batch of
    magic 2 with base offset 0, no zstd before v7. Returns (refusal outcome or None, the records
    cut to that batch: Kafka ignores a tail too short to be a batch). The log layer then checks
    the batch itself (CRC, sizes, counts)."""
    if records is None:
        return (INVALID_RECORD, None, "null records"), None
    first, refusal = _batch_at(records, 0)
    if refusal is None and first is None:
        refusal = (INVALID_RECORD, None, f"Produce v{version} must have at least one record batch per partition")
    if refusal is not None:
        return refusal, None
    size, magic = first
    if magic != 2:
        return (INVALID_RECORD, None, f"Produce v{version} only takes record batches with magic 2"), None
    if len(records) >= 23 and records[22] & 0x07 == ZSTD and version < FIRST_ZSTD_VERSION:
        return (UNSUPPORTED_COMPRESSION_TYPE, None, f"Produce v{version} may not use zstd (v7+)"), None
    second, refusal = _batch_at(records, size)
    if refusal is None and second is not None:
        refusal = (INVALID_RECORD, None, f"Produce v{version} takes exactly one record batch per partition")
    if refusal is not None:
        return refusal, None
    if _HEAD.unpack_from(records, 0)[0] != 0:
        # the log's rule in Kafka (UnifiedLog), so answered as the log's refusals are (the log start offset)
        return (INVALID_RECORD, None, "a produced batch must have base offset 0", _NO_RECORD_ERRORS), None
    return None, records[:size] if size < len(records) else records


def _batch_at(records, pos: int):
    """As Kafka's batch iterator: ((size, magic) of the whole batch at ``pos``, or None when too
    few bytes remain for one), or a CORRUPT_MESSAGE refusal for an impossible size or magic."""
    remaining = len(records) - pos
    if remaining < LOG_OVERHEAD:
        return None, None
    length = _I32.unpack_from(records, pos + 8)[0]
    if length < MIN_RECORD_OVERHEAD:
        return None, (CORRUPT_MESSAGE, None, f"record size {length} is less than the minimum record overhead")
    if remaining < MAGIC_END:
        return None, None
    magic = struct.unpack_from(">b", records, pos + 16)[0]
    if not 0 <= magic <= 2:
        return None, (CORRUPT_MESSAGE, None, f"invalid magic {magic}")
    if remaining < length + LOG_OVERHEAD:
        return None, None
    return (length + LOG_OVERHEAD, magic), None
