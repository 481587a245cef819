"""The shared base of the in-process tests (tests/unit): a broker's typed services built in a tmp dir,
an event loop whose clock a test moves forward, and bounded condition waits. No sockets, no processes.

``start_services`` builds what a broker builds before its listeners open (pybroker/broker.py): a
LogManager and a ReplicaManager, the local metadata backend and its control, the offset store, the
group and transaction coordinators. It leaves out the ISR maintenance loop: a test calls
``replicas.maybe_shrink_isr()`` itself, at the moment it chooses.
"""
import asyncio

from pybroker.config import BrokerConfig
from pybroker.controller import log_configs
from pybroker.controller.backend import build_metadata_backend
from pybroker.controller.control import ControlHost
from pybroker.controller.metadata_cache import MetadataCache
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.offsets import OffsetStore
from pybroker.log import LogManager
from pybroker.records import HEADER, decode_records
from pybroker.replica.fetch_sessions import FetchSessionCache
from pybroker.replica.fetcher import ReplicaFetcherManager
from pybroker.replica.manager import ReplicaManager
from pybroker.services import Services
from pybroker.transaction.coordinator import TransactionCoordinator

WAIT_S = 10.0
SETTLE_TURNS = 8  # loop turns after a clock move: due timers run, and what they wake runs too
DEFAULTS = {"offsets.topic.num.partitions": 2, "transaction.state.log.num.partitions": 2,
            "group.initial.rebalance.delay.ms": 0}


def broker_config(log_dir, node_id: int = 0, overrides: dict | None = None) -> BrokerConfig:
    values = {"log.dirs": str(log_dir), "node.id": node_id, **DEFAULTS, **(overrides or {})}
    return BrokerConfig.load(overrides=[f"{k}={v}" for k, v in values.items()], env={})


async def start_services(log_dir, overrides: dict | None = None) -> Services:
    """A single node's services (node id 0) over ``log_dir``; ``overrides``: broker config values."""
    cfg = broker_config(log_dir, 0, overrides)
    log_manager = LogManager([str(log_dir)], cfg.log).startup()
    replicas = ReplicaManager(cfg.node_id, log_manager, ReplicaFetcherManager(cfg.node_id, cfg),
                              cfg.replica_lag_time_max_ms)
    services = Services(cfg, cfg.node_id, MetadataCache(), FetchSessionCache(10),
                        log_manager=log_manager, replicas=replicas)

    def apply_leader_and_isr(controller_epoch, states, topic_ids, leaders):  # as the broker: topic configs apply
        return log_configs.apply_leader_and_isr(services, controller_epoch, states, topic_ids, leaders)

    def apply_log_config(topic):
        log_configs.apply_log_config(replicas, cfg, services.control.topics, topic)

    host = ControlHost(cfg, replicas, services.metadata, services.registration, cfg.advertised_listeners,
                       apply_leader_and_isr, apply_log_config, set_available=lambda available, why: None)
    backend = await build_metadata_backend(host, None, lambda values: None, cfg.log)
    services.backend, services.control, services.cluster_id = backend, backend.control, backend.cluster_id
    services.quotas = backend.quotas
    replicas.isr_writer = backend.control.write_isr
    services.offsets = OffsetStore(cfg, services)
    services.coordinator = GroupCoordinator(cfg, services.offsets)
    services.offsets.coordinator = services.coordinator
    services.transactions = TransactionCoordinator(cfg, services)
    replicas.listeners += [services.offsets, services.transactions]
    services.coordinator.startup()
    services.transactions.startup()
    await services.control.start()
    return services


async def stop_services(services: Services) -> None:
    services.replicas.stop_waiting()
    services.coordinator.shutdown()
    await services.transactions.shutdown()
    await services.control.close()
    await services.replicas.fetchers.shutdown()
    services.replicas.shutdown()
    services.log_manager.shutdown()


async def wait_for(condition, what: str, timeout_s: float = WAIT_S) -> None:
    """Until ``condition()`` holds; fails after ``timeout_s`` of the loop's clock."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def log_batches(log) -> list:
    """(header fields, batch bytes) of every batch in ``log``, in offset order, across its segments."""
    found, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = memoryview(log.read(offset, 1 << 20, max_offset=None).read())
        pos = 0
        while pos + HEADER.size <= len(data):
            header = HEADER.unpack_from(data, pos)
            end = pos + 12 + header[1]
            found.append((header, bytes(data[pos:end])))
            offset = header[0] + header[6] + 1  # base offset + last offset delta + 1
            pos = end
    return found


def log_values(log) -> list:
    """The values of the data records in ``log`` (markers left out)."""
    return [r.value for _, batch in log_batches(log) for r in decode_records(batch) if not r.control]


class MovableClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock a test moves forward (``advance``): timers due by then (call_later,
    asyncio.sleep, wait timeouts) fire at once, so a 6 s session timeout takes no wall time."""

    def __init__(self):
        super().__init__()
        self.skipped = 0.0

    def time(self) -> float:
        return super().time() + self.skipped


async def advance(seconds: float) -> None:
    """Move the running MovableClockLoop's clock forward and let what fell due run."""
    asyncio.get_running_loop().skipped += seconds
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)


def run_with_movable_clock(coro):
    with asyncio.Runner(loop_factory=MovableClockLoop) as runner:
        return runner.run(coro)
