"""Sending Produce requests to one broker: draining ready batches, building the request, and
turning each partition's response into delivered or failed (retried) batches."""
import asyncio
import logging

from pybroker.client.accumulator import now_ms
from pybroker.client.cluster import backoff_s
from pybroker.client.errors import (INVALID_METADATA_CODES, KafkaConnectionError, KafkaError, KafkaTimeoutError,
                                    error_for)
from pybroker.client.idempotence import sequence_verdict
from pybroker.client.producer_config import COMPRESSION
from pybroker.client.types import BrokerMetadata
from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

PRODUCE = 0
PRODUCE_RANGE = (3, 11)  # record batches (v3+); v9+ flexible; v10+ leader hints (KIP-951); v11 TRANSACTION_ABORTABLE
FIRST_ZSTD_VERSION = 7
DUPLICATE_SEQUENCE = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})  # may carry a hint


class BrokerSender:
    """Sends Produce requests to one broker: drains ready batches of the partitions it leads,
    up to max.in.flight.requests.per.connection requests pipelined on one connection."""

    def __init__(self, engine, node_id: int):
        self.engine = engine
        self.node_id = node_id
        self.event = asyncio.Event()
        self.inflight = 0
        self.conn = None
        self.task = None
        self._stopped = False

    def kick(self) -> None:
        self.event.set()

    def stop(self) -> None:
        self._stopped = True
        self.event.set()

    async def run(self) -> None:
        while not self._stopped:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not silently stop sending for this broker
                log.exception("the producer's sender for broker %s failed; restarting it", self.node_id)
                await asyncio.sleep(0.1)

    async def _run(self) -> None:
        eng = self.engine
        loop = eng.loop
        connect_failures = 0
        while not self._stopped:
            self.event.clear()
            if not eng.pid_ready.done():
                await eng.pid_ready  # sequence numbers need the producer id
                continue
            wait_ms = -1
            if self.inflight < eng.max_in_flight:
                now = now_ms()
                conn = self.conn
                if conn is None or conn.closed:
                    # connect before draining: a drained batch must go straight onto the wire (and
                    # into the in-flight list), never wait in a local variable through an await
                    wanted, next_ms, leaderless = eng.acc.has_ready(self.node_id, eng.cluster.leader_for, now)
                    if leaderless:
                        eng.request_metadata()
                    if wanted:
                        try:
                            self.conn = await eng.cluster.connection(self.node_id)
                            connect_failures = 0
                        except KafkaError as exc:
                            connect_failures += 1
                            batches, _, _ = eng.acc.drain(self.node_id, eng.cluster.leader_for, now_ms())
                            self._fail_all(batches, exc, False, attempted=True)
                            eng.request_metadata()
                            await asyncio.sleep(backoff_s(connect_failures, eng.cfg["reconnect.backoff.ms"],
                                                          eng.cfg["reconnect.backoff.max.ms"]))
                        continue
                else:
                    batches, next_ms, leaderless = eng.acc.drain(self.node_id, eng.cluster.leader_for, now, conn)
                    if leaderless:
                        eng.request_metadata()
                    if batches:
                        self._send(conn, batches)
                        continue
                wait_ms = -1 if next_ms < 0 else max(0, next_ms - now)
            timer = loop.call_later(wait_ms / 1000, self.event.set) if wait_ms >= 0 else None
            await self.event.wait()
            if timer is not None:
                timer.cancel()

    def _send(self, conn, batches) -> None:
        eng = self.engine
        try:
            version = conn.version(PRODUCE, *PRODUCE_RANGE)
            if eng.codec == COMPRESSION["zstd"] and version < FIRST_ZSTD_VERSION:
                raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                 f"broker {conn.address} cannot take zstd batches (Produce v{version})")
        except KafkaError as exc:
            for b in batches:  # a fresh non-retriable error per batch
                b.attempts += 1
                self._failed(b, KafkaError(exc.code, exc.message, retriable=False), False)
            return
        api = REQUESTS[PRODUCE]
        topics = {}
        size = 0
        for b in batches:
            topics.setdefault(b.topic, []).append(api.PartitionProduceData(index=b.partition, records=b.data))
            eng.acc.sent(b, conn)
            size += len(b.data)
        req = api(transactional_id=eng.transactional_id, acks=eng.acks, timeout_ms=eng.cfg["request.timeout.ms"],
                  topic_data=[api.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()])
        eng.stats["requests"] += 1
        eng.stats["bytes_sent"] += size
        if eng.acks == 0:
            try:
                conn.send_nowait(req, version)
            except KafkaError as exc:
                self._fail_all(batches, exc, True)
                return
            for b in batches:
                self._delivered(b, -1, -1)
            return
        try:
            fut = asyncio.ensure_future(conn.request(req, version))  # written now; answered later
        except Exception as exc:  # could not even encode or write it: nothing reached the broker
            err = exc if isinstance(exc, KafkaError) else KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot send a Produce request: {exc!r}", retriable=False)
            self._fail_all(batches, err, False)
            return
        self.inflight += 1
        fut.add_done_callback(lambda f: self._on_response(f, batches))

    def _on_response(self, fut, batches) -> None:
        self.inflight -= 1
        try:
            body = fut.result()
        except asyncio.CancelledError:
            body, exc = None, KafkaConnectionError("the request was cancelled")
        except KafkaError as e:
            body, exc = None, e
        except Exception as e:
            body, exc = None, KafkaError(-1, f"Produce request failed: {e!r}", retriable=True)
        try:
            if body is None:
                self._fail_all(batches, exc, True)
                return
            parts = {}
            for t in body.responses:
                for pr in t.partition_responses:
                    parts[(t.name, pr.index)] = pr
            for b in batches:
                pr = parts.get((b.topic, b.partition))
                if pr is None:
                    self._failed(b, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                   f"no response for {b.topic}-{b.partition}", retriable=True), True)
                elif pr.error_code == 0 or pr.error_code == DUPLICATE_SEQUENCE:
                    self._delivered(b, pr.base_offset, pr.log_append_time_ms)
                else:
                    msg = pr.error_message or _description(pr.error_code)
                    hinted = pr.error_code in LEADER_MOVED and self._apply_hint(b, pr, body)
                    err = error_for(pr.error_code, f"{b.topic}-{b.partition}: {msg}")
                    if pr.record_errors:  # KIP-467: the records that made the batch refused
                        err.record_errors = {e.batch_index: e.batch_index_error_message for e in pr.record_errors}
                    self._failed(b, err, False, hinted)
        finally:
            self.kick()

    def _apply_hint(self, b, pr, body) -> bool:
        """Move the partition to the leader the broker named (v10+), skipping a metadata refresh."""
        hint = pr.current_leader
        if hint is None or hint.leader_id < 0:
            return False
        endpoints = {n.node_id: BrokerMetadata(n.node_id, n.host, n.port, n.rack) for n in body.node_endpoints or ()}
        applied = self.engine.cluster.maybe_update_leader(b.topic, b.partition, hint.leader_id, hint.leader_epoch,
                                                          endpoints)
        if applied:
            self.engine.stats["leader_hints"] += 1
            if hint.leader_id != self.node_id:
                self.engine.kick_leader(hint.leader_id)
        return applied

    # ---- outcomes ---------------------------------------------------------------------------

    def _delivered(self, b, base_offset: int, log_append_time: int) -> None:
        eng = self.engine
        eng.acc.acked(b)
        eng.stats["records_sent"] += b.count
        eng.stats["batches_sent"] += 1
        eng.complete(b, None, base_offset, log_append_time)

    def _fail_all(self, batches, err: KafkaError, maybe_written: bool, attempted: bool = False) -> None:
        """``_failed`` for each batch; ``attempted``: count a try that never reached the wire."""
        for b in batches:
            if attempted:
                b.attempts += 1
            self._failed(b, err, maybe_written)

    def _failed(self, b, err: KafkaError, maybe_written: bool, hinted: bool = False) -> None:
        """Retry the batch (unchanged, after a backoff) or fail it for good. ``hinted``: the
        response already named the new leader, so no metadata refresh is needed."""
        eng = self.engine
        now = now_ms()
        code = err.code
        retriable = err.retriable
        fatal = False
        if eng.idempotent:
            verdict = sequence_verdict(code, lambda: eng.acc.out_of_order_is_retriable(b))
            if verdict is not None:
                retriable, fatal = verdict, not verdict
        if b.tp in eng.failed_partitions:
            retriable = False
        if (retriable and not eng.stopped and b.attempts <= eng.retries
                and now - b.created_ms < eng.delivery_timeout_ms):
            if not hinted and (isinstance(err, KafkaConnectionError) or code in INVALID_METADATA_CODES):
                eng.cluster.request_update()
                eng.request_metadata()
            # a hinted new leader is tried at once (KIP-951); anything else backs off
            delay = 0.0 if hinted else backoff_s(b.attempts - 1, eng.cfg["retry.backoff.ms"],
                                                 eng.cfg["retry.backoff.max.ms"])
            eng.acc.requeue(b, now + int(delay * 1000), maybe_written)
            eng.stats["retries"] += 1
            return
        if retriable and now - b.created_ms >= eng.delivery_timeout_ms:
            err = KafkaTimeoutError(f"expiring {b.count} record(s) for {b.topic}-{b.partition}: "
                                    f"{now - b.created_ms} ms has passed since batch creation "
                                    f"(last error: {err.name}: {err.message})")
        eng.give_up(b, err, maybe_written, fatal)


def _description(code):
    try:
        return ErrorCode(code).description
    except ValueError:
        return "unknown error code"
