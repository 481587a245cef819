"""The schema registry served by the broker: Confluent Schema Registry's REST API over the compacted
topic ``_schemas``.

The registry is a client of the brokers, as Confluent's is: it stores and reads schemas through the
Kafka protocol (``kafka_log.py``), never through the serving stack. On a single node it is always the
primary; in a ZooKeeper cluster one registry is elected primary (``zk_primary.py``) and the others
serve reads from their own copy of the topic and forward writes to it. ``start_registry`` is what the
broker calls.
"""
import logging
import time
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
DEFAULT_ZK_SESSION_MS = 18000
LOAD_DEADLINE_S = 300.0  # reading the topic at start gives up after this (the registry then stays off)
LOAD_STEP_S = 30.0


@dataclass
class RunningRegistry:
    """A started registry: its bound URLs (real ports) and its parts, stopped together."""
    urls: list
    server: object
    registry: object
    primary: object
    log: object

    async def stop(self) -> None:
        """The HTTP listener first (no new requests), then the election, then the storage clients."""
        for step in (self.server.stop, self.primary.close, self._close_registry, self.log.close):
            try:
                await step()
            except Exception:  # stopping anyway: the next part must still let go of its resources
                log.exception("stopping the schema registry")

    async def _close_registry(self) -> None:
        close = getattr(self.registry, "close", None)
        if close is not None:
            await close()


def reachable_url(url: str, advertised_host: str | None) -> str:
    """``url`` with a wildcard bind address replaced by the host other brokers reach this one at."""
    parts = urlsplit(url)
    if parts.hostname in WILDCARD_HOSTS or parts.hostname is None:
        host = advertised_host or "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url


async def _load(schema_log) -> None:
    """Read the topic up to its end as it is now; retried while its partition has no leader."""
    from pybroker.registry.kafka_log import StorageUnavailable
    deadline = time.monotonic() + LOAD_DEADLINE_S
    while True:
        try:
            return await schema_log.catch_up(min(LOAD_STEP_S, max(0.1, deadline - time.monotonic())))
        except StorageUnavailable as exc:
            if time.monotonic() >= deadline:
                raise
            log.warning("schema registry: loading %s: %s; retrying", schema_log.topic, exc)


async def start_registry(raw_config: Mapping[str, str], bootstrap: str, client_config: dict,
                         zk_connect: str | None, authenticate: Callable[[str, str], bool] | None = None, *,
                         security=None, advertised_host: str | None = None) -> RunningRegistry | None:
    """Start the registry the ``schema.registry.*`` keys of ``raw_config`` describe; None when
    ``schema.registry.listeners`` is unset.

    ``bootstrap``: the broker listener the registry's clients connect to; ``client_config``: their
    settings (security); ``security``: a prebuilt ClientSecurity for them (see KafkaSchemaLog);
    ``zk_connect``: the cluster's ZooKeeper (None: a single node, always primary); ``authenticate(user,
    password)``: HTTP basic authentication with the broker's SASL users (None: none; the
    ``schema.registry.authentication`` setting may turn it off); ``advertised_host``: the host other brokers
    reach this one at, for a registry bound to a wildcard address."""
    from pybroker.registry.http import RegistryServer
    from pybroker.registry.kafka_log import KafkaSchemaLog
    from pybroker.registry.primary import SinglePrimary
    from pybroker.registry.service import SchemaRegistry
    from pybroker.registry.settings import RegistrySettings
    from pybroker.registry.zk_primary import ZkPrimary
    settings = RegistrySettings.from_raw(raw_config)
    if settings is None:
        return None
    schema_log = KafkaSchemaLog(bootstrap, client_config, settings.topic, settings.replication_factor,
                                security=security, cluster=bool(zk_connect))
    if zk_connect:
        session_ms = int(raw_config.get("zookeeper.session.timeout.ms") or DEFAULT_ZK_SESSION_MS)
        primary = ZkPrimary(zk_connect, session_timeout_s=session_ms / 1000)
    else:
        primary = SinglePrimary(reachable_url(settings.listeners[0], advertised_host))
    if settings.authentication == "none":
        authenticate = None
    elif settings.authentication == "basic" and authenticate is None:
        raise ValueError("schema.registry.authentication=basic needs the broker's SASL users: no listener "
                         "of this broker speaks SASL")
    registry = SchemaRegistry(schema_log, primary, settings)
    server = RegistryServer(registry, settings, authenticate)
    running = RunningRegistry([], server, registry, primary, schema_log)
    try:
        await registry.start()  # tails the topic (created when missing)
        await _load(schema_log)  # no answer before the state holds what the topic held at start
        await server.start()
        running.urls = list(server.urls)
        if isinstance(primary, ZkPrimary):
            primary.my_url = reachable_url(running.urls[0], advertised_host)
        await primary.start()
    except BaseException:
        await running.stop()  # each part lets go of what it holds, started or not
        raise
    return running
