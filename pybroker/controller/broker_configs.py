"""Dynamic broker configs on a cluster: ``/config/brokers/<id>`` over ``/config/brokers/<default>``.

Set with IncrementalAlterConfigs / AlterConfigs on a broker resource (a broker id: that broker;
the empty name: every broker's default), kept in ZooKeeper as Kafka keeps them, watched by every
broker and applied without a restart. The keys that may change live are Kafka's replication
throttle rates.
"""
import asyncio
import json
import logging

from pybroker.controller import zk as zkpaths
from pybroker.errors import BrokerError

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
DYNAMIC = {  # key -> default
    "leader.replication.throttled.rate": LONG_MAX,
    "follower.replication.throttled.rate": LONG_MAX,
    # kept and shown, but inert: no replica moves between log dirs here (Kafka's tools clear it with the others)
    "replica.alter.log.dirs.io.max.bytes.per.second": LONG_MAX,
}
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3  # DescribeConfigs sources


class InvalidBrokerConfigError(BrokerError):
    code = 40  # INVALID_CONFIG


class StaticBrokerConfigError(BrokerError):
    code = 42  # INVALID_REQUEST, as Kafka answers a key it cannot change live


def validate(changes: dict) -> None:
    static = sorted(k for k in changes if k not in DYNAMIC)
    if static:
        raise StaticBrokerConfigError(f"Cannot update these configs dynamically: {', '.join(static)}")
    for key, value in changes.items():
        if value is None:
            continue
        try:
            if int(value) < 0:
                raise ValueError
        except ValueError:
            raise InvalidBrokerConfigError(f"{key} must be a non-negative integer, got {value!r}") from None


class DynamicBrokerConfigs:
    def __init__(self, broker, zk):
        self.broker = broker
        self.zk = zk
        self.entities = {zkpaths.DEFAULT_BROKER: {}, str(broker.config.node_id): {}}  # entity -> {key: value}
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
            self.broker.apply_dynamic_configs(self.effective())

    def effective(self) -> dict:
        """{key: int value} for every dynamic key: this broker's, else the default's, else Kafka's default."""
        mine, default = self.entities[str(self.broker.config.node_id)], self.entities[zkpaths.DEFAULT_BROKER]
        return {k: int(mine.get(k, default.get(k, d))) for k, d in DYNAMIC.items()}

    def describe(self) -> dict:
        """{key: (value, source or None when at Kafka's default)} for DescribeConfigs."""
        mine, default = self.entities[str(self.broker.config.node_id)], self.entities[zkpaths.DEFAULT_BROKER]
        out = {}
        for key, d in DYNAMIC.items():
            if key in mine:
                out[key] = (mine[key], DYNAMIC_BROKER_CONFIG)
            elif key in default:
                out[key] = (default[key], DYNAMIC_DEFAULT_BROKER_CONFIG)
            else:
                out[key] = (str(d), None)
        return out

    async def alter(self, name: str, changes: dict, replace_all: bool, validate_only: bool) -> None:
        """``changes``: {key: value or None (back to the default)}; ``name`` "" is the cluster default."""
        validate(changes)
        entity = name or zkpaths.DEFAULT_BROKER
        current = {} if replace_all else dict(await asyncio.to_thread(self.zk.broker_configs, entity))
        for key, value in changes.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = str(int(value))
        if validate_only:
            return
        await asyncio.to_thread(self.zk.set_broker_configs, entity, current)
        if entity in self.entities:
            self._set(entity, current)
