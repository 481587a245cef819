"""Dynamic broker configs: per broker (``<id>``) over the cluster-wide default (``<default>``).

Set with IncrementalAlterConfigs / AlterConfigs on a broker resource (a broker id: that broker;
the empty name: every broker's default) and applied without a restart. A cluster keeps them in
ZooKeeper as Kafka keeps them (``/config/brokers/<id>``, ``/config/brokers/<default>``), watched by
every broker (``DynamicBrokerConfigs``); a single node keeps them in ``dynamic-broker-configs.json``
in its first log dir, written atomically (``LocalDynamicBrokerConfigs``).

The keys that may change live: Kafka's replication throttle rates, ``num.replica.fetchers``, the
log cleaner's threads, dedupe buffer, backoff and I/O rate, and the ``log.*`` topic defaults
that exist here (``LOG_KEYS``: retention, segment size and roll time, flush intervals,
message.max.bytes, ...), applied to open logs whose topics do not override them. A key Kafka keeps
read-only is refused: INVALID_REQUEST "Cannot update these configs dynamically: ..."; a bad value is
INVALID_CONFIG. Every other key, Kafka's dynamic keys that mean nothing here and custom keys alike, is
stored and described as Kafka does, and changes nothing.
"""
import asyncio
import json
import logging
import os

from pybroker import config_catalog
from pybroker.controller import zk_paths as zkpaths
from pybroker.errors import BrokerError
from pybroker.log.config import BROKER_NAMES, LogConfig
from pybroker.protocol.errors import INVALID_CONFIG, INVALID_REQUEST

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
DYNAMIC = {  # key -> default
    "leader.replication.throttled.rate": LONG_MAX,
    "follower.replication.throttled.rate": LONG_MAX,
    # kept and shown, but inert: no replica moves between log dirs here (Kafka's tools clear it with the others)
    "replica.alter.log.dirs.io.max.bytes.per.second": LONG_MAX,
    "num.replica.fetchers": None,  # None: the static config's value
    "log.cleaner.threads": None,
    "log.cleaner.dedupe.buffer.size": None,
    "log.cleaner.backoff.ms": None,
    "log.cleaner.io.max.bytes.per.second": None,
}
AT_LEAST_ONE = ("num.replica.fetchers",)
DECIMALS = ("log.cleaner.io.max.bytes.per.second",)  # every other dynamic key is an integer
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3  # DescribeConfigs sources
# the broker-level log defaults Kafka lets you change live and that exist here
LOG_KEYS = frozenset(BROKER_NAMES.values()) | {"log.retention.minutes", "log.retention.hours"}
LOCAL_FILE = "dynamic-broker-configs.json"


class InvalidBrokerConfigError(BrokerError):
    code = INVALID_CONFIG


class StaticBrokerConfigError(BrokerError):
    code = INVALID_REQUEST  # as Kafka answers a key it cannot change live


def validate(changes: dict, merged_log: dict | None = None, base: LogConfig | None = None) -> None:
    """``changes``: {key: value or None}; ``merged_log``: the log keys as they would be afterwards."""
    static = sorted(k for k in changes if k not in DYNAMIC and k not in LOG_KEYS and _read_only(k))
    if static:
        raise StaticBrokerConfigError(f"Cannot update these configs dynamically: {', '.join(static)}")
    for key, value in changes.items():
        if value is None or key in LOG_KEYS or key not in DYNAMIC:
            continue
        least = 1 if key in AT_LEAST_ONE else 0
        kind = float if key in DECIMALS else int
        try:
            if not kind(value) >= least:
                raise ValueError
        except ValueError:
            raise InvalidBrokerConfigError(f"{key} must be {'a number' if kind is float else 'an integer'} "
                                           f"of at least {least}, got {value!r}") from None
    if merged_log:
        try:
            LogConfig.from_properties(merged_log, base=base)
        except (ValueError, TypeError) as exc:
            raise InvalidBrokerConfigError(f"Invalid config value: {exc}") from None


def _read_only(key: str) -> bool:
    known = config_catalog.broker_key(key)
    return known is not None and known.mode == config_catalog.READ_ONLY


class DynamicBrokerConfigs:
    """``apply`` takes the effective values (``effective()``) whenever they change; ``static_log`` is
    the log defaults of the broker's static config, which dynamic log defaults override."""

    def __init__(self, config, apply, static_log: LogConfig, zk):
        self.config = config
        self.apply = apply
        self.static_log = static_log
        self.zk = zk
        self.entities = {zkpaths.DEFAULT_BROKER: {}, str(config.node_id): {}}  # entity -> {key: value}
        self.loop = None

    async def startup(self) -> None:
        self.loop = asyncio.get_running_loop()
        for entity in list(self.entities):
            await asyncio.to_thread(self.zk.kazoo.DataWatch, f"{zkpaths.CONFIG_BROKERS}/{entity}",
                                    self._watcher(entity))

    def _watcher(self, entity: str):
        return lambda data, stat: self._on_change(entity, data)  # kazoo passes a third argument to 3-ary callbacks

    def _on_change(self, entity: str, data) -> None:
        """kazoo thread: hand the new configs to the loop."""
        try:
            configs = dict(json.loads(data).get("config", {})) if data else {}
        except (ValueError, AttributeError, TypeError):
            log.warning("ignoring unreadable dynamic configs of broker %s", entity)
            return
        self.loop.call_soon_threadsafe(self._set, entity, configs)

    def _set(self, entity: str, configs: dict) -> None:
        if self.entities.get(entity) != configs:
            self.entities[entity] = configs
            log.info("dynamic configs of broker %s: %s", entity, configs or "(none)")
            self.apply(self.effective())

    def effective(self) -> dict:
        """{key: int value} for every dynamic key: this broker's, else the default's, else Kafka's
        default; and under "log" the dynamic log defaults {key: value} (the broker's over the default's)."""
        mine, default = self.entities[str(self.config.node_id)], self.entities[zkpaths.DEFAULT_BROKER]
        out = {k: (float if k in DECIMALS else int)(mine.get(k, default.get(k, self._default(k)))) for k in DYNAMIC}
        out["log"] = {k: v for k, v in {**default, **mine}.items() if k in LOG_KEYS}
        return out

    def _default(self, key: str) -> int:
        d = DYNAMIC[key]
        return getattr(self.config, key.replace(".", "_")) if d is None else d

    def describe_log(self) -> dict:
        """{log key: [(value, source)] most specific first} for the dynamic log defaults that are set."""
        mine, default = self.entities[str(self.config.node_id)], self.entities[zkpaths.DEFAULT_BROKER]
        out = {}
        for key in sorted(LOG_KEYS & (set(mine) | set(default))):
            out[key] = ([(mine[key], DYNAMIC_BROKER_CONFIG)] if key in mine else []) + \
                       ([(default[key], DYNAMIC_DEFAULT_BROKER_CONFIG)] if key in default else [])
        return out

    async def _load(self, entity: str) -> dict:
        return dict(await asyncio.to_thread(self.zk.broker_configs, entity))

    async def _store(self, entity: str, configs: dict) -> None:
        await asyncio.to_thread(self.zk.set_broker_configs, entity, configs)

    def describe(self) -> dict:
        """{key: (value, source or None when at Kafka's default)} for DescribeConfigs."""
        mine, default = self.entities[str(self.config.node_id)], self.entities[zkpaths.DEFAULT_BROKER]
        out = {}
        for key in DYNAMIC:
            d = self._default(key)
            if key in mine:
                out[key] = (mine[key], DYNAMIC_BROKER_CONFIG)
            elif key in default:
                out[key] = (default[key], DYNAMIC_DEFAULT_BROKER_CONFIG)
            else:
                out[key] = (str(d), None)
        for key in sorted((set(mine) | set(default)) - set(DYNAMIC) - LOG_KEYS):  # stored, without effect here
            out[key] = (mine[key], DYNAMIC_BROKER_CONFIG) if key in mine \
                else (default[key], DYNAMIC_DEFAULT_BROKER_CONFIG)
        return out

    async def alter(self, name: str, changes: dict, replace_all: bool, validate_only: bool) -> None:
        """``changes``: {key: value or None (back to the default)}; ``name`` "" is the cluster default."""
        validate(changes)
        entity = name or zkpaths.DEFAULT_BROKER
        current = {} if replace_all else await self._load(entity)
        for key, value in changes.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = (str((float if key in DECIMALS else int)(value)) if key in DYNAMIC
                                else str(value).strip())
        others = [c for e, c in self.entities.items() if e != entity]
        merged = {k: v for c in others + [current] for k, v in c.items() if k in LOG_KEYS}
        validate({}, merged, self.static_log)
        if validate_only:
            return
        await self._store(entity, current)
        if entity in self.entities:
            self._set(entity, current)


class LocalDynamicBrokerConfigs(DynamicBrokerConfigs):
    """A single node's dynamic broker configs: ``dynamic-broker-configs.json`` in the first log dir,
    ``{"format": 1, "brokers": {"<default>": {key: value}, "<id>": {...}}}``, rewritten atomically."""

    def __init__(self, config, apply, static_log: LogConfig, log_dir: str):
        super().__init__(config, apply, static_log, None)
        self.path = os.path.join(log_dir, LOCAL_FILE)

    def _read(self) -> dict:
        if not os.path.exists(self.path):
            return {}
        with open(self.path) as f:
            return {e: dict(c) for e, c in json.load(f).get("brokers", {}).items()}

    def load(self) -> None:
        """At start, before the partitions open: read the file and apply it."""
        for entity, configs in self._read().items():
            if entity in self.entities:
                self.entities[entity] = configs
        self.apply(self.effective())

    async def startup(self) -> None:
        self.loop = asyncio.get_running_loop()

    async def _load(self, entity: str) -> dict:
        return dict(self.entities.get(entity) or self._read().get(entity, {}))

    async def _store(self, entity: str, configs: dict) -> None:
        from pybroker.durable_json import write_json_atomically
        data = self._read()
        data[entity] = configs
        await asyncio.to_thread(write_json_atomically, self.path,
                                {"format": 1, "brokers": {e: c for e, c in data.items() if c}})
