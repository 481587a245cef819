"""The registry's storage: one compacted topic (``_schemas`` by default), written and read with our own
async client, as Confluent's registry is a Kafka client of its cluster.

The topic has one partition, ``cleanup.policy=compact``; its replication factor is the setting or, unset,
min(3, brokers in the metadata) (a cluster's registry waits a little for its brokers to register first),
and ``min.insync.replicas`` is one less than that (at least 1). Appends use acks=all with idempotence;
the offset comes back from the delivery report. A consumer assigned to partition 0 (no group) tails the
log from offset 0 and hands each record to ``on_record(key, value, offset)`` in order. "Applied" is the
consumer's position: every offset below it has been seen (compaction gaps included).
"""
import asyncio
import logging
import time
from typing import Callable

from pybroker.client.admin import AsyncAdminClient
from pybroker.client.consumer import AsyncConsumer
from pybroker.client.errors import KafkaError, KafkaErrors
from pybroker.client.producer import AsyncProducer
from pybroker.client.types import LATEST, NewTopic, TopicPartition
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "_schemas"
MAX_REPLICATION = 3
BROKERS_WAIT_S = 10.0  # a cluster's first registry waits this long for 3 brokers before choosing fewer replicas
CREATE_DEADLINE_S = 120.0  # creating (or finding) the topic gives up after this
POLL_MS = 500  # a poll returns as soon as records come; this only paces an idle loop
RETRY_S = 0.5
APPEND_TIMEOUT_MS = 30000  # one append, retries included
CLIENT_DEFAULTS = {"request.timeout.ms": 10000, "default.api.timeout.ms": 20000, "retry.backoff.max.ms": 500}


class StorageUnavailable(Exception):
    """The log could not be read or written (the REST layer answers a store error)."""


class LogTimeout(StorageUnavailable, TimeoutError):
    """The log was not read up to an offset in time (the REST layer answers an operation timeout)."""


class KafkaSchemaLog:
    """SchemaLog over a topic of the brokers at ``bootstrap`` (``host:port[,host:port]``).

    ``client_config``: client settings for every connection (security.protocol, sasl.*, ssl.*);
    ``security``: a prebuilt ClientSecurity that replaces what those settings say (the broker's own
    inter-broker link, whose TLS context comes from its listener's stores); ``cluster``: wait for more
    brokers before choosing the replication factor."""

    def __init__(self, bootstrap: str, client_config: dict | None = None, topic: str = DEFAULT_TOPIC,
                 replication_factor: int | None = None, *, security=None, cluster: bool = False):
        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        self._replication_factor = replication_factor
        self._cluster = cluster
        self._security = security
        self._conf = {**CLIENT_DEFAULTS, **(client_config or {}), "bootstrap.servers": bootstrap}
        self._admin = None
        self._producer = None
        self._consumer = None
        self._tail = None
        self._on_record = None
        self._position = 0  # every offset below has been handed to on_record
        self._progress = asyncio.Event()  # set (and replaced) whenever the position moves
        self._closed = False
        self._append_lock = asyncio.Lock()

    # ---- clients -------------------------------------------------------------------------------

    def _secured(self, client):
        """Give a client's parsed config the prebuilt security (the inter-broker TLS context)."""
        if self._security is not None:
            client.config.__dict__["_security"] = self._security
        return client

    def _new_producer(self) -> AsyncProducer:
        return self._secured(AsyncProducer({**self._conf, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                                            "allow.auto.create.topics": False, "max.block.ms": APPEND_TIMEOUT_MS,
                                            "delivery.timeout.ms": APPEND_TIMEOUT_MS}))

    # ---- SchemaLog -------------------------------------------------------------------------------

    async def start(self, on_record: Callable[[bytes, bytes | None, int], None]) -> None:
        """Create the topic when missing, then tail it from offset 0 in the background."""
        self._on_record = on_record
        self._admin = self._secured(AsyncAdminClient(dict(self._conf)))
        await self._ensure_topic()
        self._consumer = self._secured(AsyncConsumer({**self._conf, "auto.offset.reset": "earliest",
                                                      "enable.auto.commit": False,
                                                      "allow.auto.create.topics": False}))
        await self._consumer.start()
        self._consumer.assign([(self.topic, 0, 0)])
        self._tail = asyncio.get_running_loop().create_task(self._tail_loop(), name=f"registry tail {self.topic}")

    async def append(self, key: bytes, value: bytes | None) -> int:
        """Write one record (acks=all, idempotent); its offset once the in-sync replicas have it."""
        if self._closed:
            raise StorageUnavailable("the schema log is closed")
        async with self._append_lock:
            if self._producer is None:
                self._producer = self._new_producer()
                await self._producer.start()
            try:
                meta = await self._producer.send(self.topic, value=value, key=key, partition=0)
            except KafkaError as exc:
                # the idempotent sequence may be broken: the next append starts a new producer
                producer, self._producer = self._producer, None
                await _close_quietly(producer.close(0))
                raise StorageUnavailable(f"cannot write to {self.topic}: {exc}") from exc
            return meta.offset

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Return once on_record has seen ``offset``; LogTimeout after ``timeout_s``."""
        await self._wait_position(offset + 1, timeout_s)

    async def catch_up(self, timeout_s: float) -> None:
        """Return once every record below the partition's current end (high watermark) is applied."""
        deadline = time.monotonic() + timeout_s
        end = await self._end_offset(deadline)
        await self._wait_position(end, max(0.0, deadline - time.monotonic()))

    async def close(self) -> None:
        self._closed = True
        if self._tail is not None:
            self._tail.cancel()
            await asyncio.gather(self._tail, return_exceptions=True)
        for client, closing in ((self._producer, lambda c: c.close(5)),
                                (self._consumer, lambda c: c.close(autocommit=False, timeout_ms=5000)),
                                (self._admin, lambda c: c.close())):
            if client is not None:
                await _close_quietly(closing(client))
        self._producer = self._consumer = self._admin = None

    @property
    def position(self) -> int:
        """The next offset to apply."""
        return self._position

    # ---- the topic -------------------------------------------------------------------------------

    async def _ensure_topic(self) -> None:
        deadline = time.monotonic() + CREATE_DEADLINE_S
        tries = 0
        while True:
            try:
                if await self._topic_exists():
                    return
                rf = await self._choose_replication(deadline)
                config = {"cleanup.policy": "compact", "min.insync.replicas": max(1, rf - 1)}
                await self._admin.create_topics([NewTopic(self.topic, 1, rf, config)])
                log.info("created the schema topic %s (replication factor %d, compacted)", self.topic, rf)
                return
            except KafkaErrors as exc:
                err = exc.errors.get(self.topic)
                if err is not None and err.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                    return  # another broker's registry created it first
                problem = err or exc
            except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                problem = exc
            if time.monotonic() >= deadline:
                raise StorageUnavailable(f"cannot create the schema topic {self.topic}: {problem}")
            if tries % 10 == 0:
                log.info("schema topic %s not created yet (%s); retrying", self.topic, problem)
            tries += 1
            await asyncio.sleep(RETRY_S)

    async def _topic_exists(self) -> bool:
        md = await self._admin.list_topics()
        topic = md.topics.get(self.topic)
        if topic is None or topic.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return False
        if topic.error:
            raise KafkaError(topic.error)
        return True

    async def _choose_replication(self, deadline: float) -> int:
        if self._replication_factor is not None:
            return self._replication_factor  # a factor the cluster cannot meet yet fails and is retried
        wait_until = min(deadline, time.monotonic() + (BROKERS_WAIT_S if self._cluster else 0.0))
        while True:
            brokers = len((await self._admin.list_topics()).brokers)
            if brokers >= MAX_REPLICATION or time.monotonic() >= wait_until:
                return max(1, min(MAX_REPLICATION, brokers))
            await asyncio.sleep(RETRY_S)

    async def _end_offset(self, deadline: float) -> int:
        while True:
            try:
                return (await self._admin.list_offsets({self.tp: LATEST}))[self.tp].offset
            except (KafkaError, OSError) as exc:
                if time.monotonic() >= deadline:
                    raise LogTimeout(f"cannot read the end of {self.topic}: {exc}") from exc
            await asyncio.sleep(min(RETRY_S, max(0.0, deadline - time.monotonic())))

    # ---- tailing -----------------------------------------------------------------------------------

    async def _tail_loop(self) -> None:
        consumer = self._consumer
        while not self._closed:
            try:
                records = await consumer.poll(timeout_ms=POLL_MS)
                for record in records:
                    self._apply(record.key, record.value, record.offset)
                    self._advance(record.offset + 1)
                self._advance(await consumer.position(self.tp, timeout_ms=1000))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the client reconnects; keep tailing
                log.warning("reading %s: %s; retrying", self.topic, exc)
                await asyncio.sleep(RETRY_S)

    def _apply(self, key, value, offset: int) -> None:
        try:
            self._on_record(None if key is None else bytes(key), None if value is None else bytes(value), offset)
        except Exception:  # one bad record must not stop the registry: it is skipped, as Confluent does
            log.exception("skipping the record at %s offset %d", self.topic, offset)

    def _advance(self, position: int) -> None:
        if position > self._position:
            self._position = position
            event, self._progress = self._progress, asyncio.Event()
            event.set()

    async def _wait_position(self, position: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._position < position:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LogTimeout(f"{self.topic}: offset {position - 1} not read within {timeout_s:.1f}s "
                                         f"(at {self._position})")
            try:
                await asyncio.wait_for(self._progress.wait(), remaining)
            except asyncio.TimeoutError:
                pass


async def _close_quietly(closing) -> None:
    try:
        await closing
    except Exception as exc:  # closing after a failure: what matters is that it is gone
        log.debug("closing a registry client: %s", exc)
