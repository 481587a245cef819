"""``EmbeddedCluster``: a real multi-broker cluster for tests -- one ZooKeeper, N ``EmbeddedBroker``
processes (ids 1..N) on 127.0.0.1, each with its own data dir under one temporary directory.

::

    from pybroker.embedded_cluster import EmbeddedCluster

    with EmbeddedCluster(brokers=3) as cluster:
        cluster.create_topic("events", partitions=3)   # replication factor 3 by default
        ... cluster.bootstrap_servers ...
        cluster.kill(2); cluster.start_broker(2)

``zookeeper``: a running ``ZooKeeperServer``, a ``host:port`` connect string, or None to start one
(Debian's ``zookeeper`` jars and a Java runtime; ``ZooKeeperNotInstalled`` otherwise). The cluster
lives under a fresh chroot, so clusters can share one ZooKeeper. Defaults follow
``pybroker dev-cluster``: replication factor min(3, N) for topics and for ``__consumer_offsets``,
``min.insync.replicas`` 2 from three brokers on. A restarted broker keeps its data and its port.
"""
import os
import shutil
import tempfile
import threading
import uuid

from pybroker.embedded import START_TIMEOUT, STOP_TIMEOUT, EmbeddedBroker, EmbeddedBrokerError, wait_for_leaders


class EmbeddedCluster:
    def __init__(self, brokers: int = 3, *, overrides: dict | None = None, broker_overrides: dict | None = None,
                 zookeeper=None, start_timeout: float = START_TIMEOUT):
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.size = brokers
        self.start_timeout = start_timeout
        self._workdir = tempfile.mkdtemp(prefix="pybroker-cluster-")
        self._zookeeper = zookeeper
        self._own_zk = None
        self.zk_connect = None
        self.chroot = f"/pybroker-{uuid.uuid4().hex[:8]}"
        replication = min(3, brokers)
        self._settings = {
            "default.replication.factor": replication, "offsets.topic.replication.factor": replication,
            "min.insync.replicas": 2 if brokers >= 3 else 1,
            "zookeeper.session.timeout.ms": 6000, "controlled.shutdown.retry.backoff.ms": 1000,
            **(overrides or {})}
        self._broker_overrides = broker_overrides or {}
        self.brokers: dict[int, EmbeddedBroker] = {}

    def start(self) -> "EmbeddedCluster":
        if self.brokers:
            for broker_id in self.brokers:
                self.start_broker(broker_id)
            return self
        try:
            self._start_zookeeper()
            for broker_id in range(1, self.size + 1):
                settings = {"broker.id": broker_id, "zookeeper.connect": self.zk_connect + self.chroot,
                            **self._settings, **self._broker_overrides.get(broker_id, {})}
                self.brokers[broker_id] = EmbeddedBroker(
                    settings, data_dir=os.path.join(self._workdir, f"broker-{broker_id}"),
                    log_path=os.path.join(self._workdir, f"broker-{broker_id}.log"), start_timeout=self.start_timeout)
            self._parallel(EmbeddedBroker.start, list(self.brokers.values()))
        except BaseException:
            self.close()
            raise
        return self

    def _start_zookeeper(self) -> None:
        from pybroker.controller.zk_server import ZooKeeperServer
        zk = self._zookeeper
        if zk is None:
            zk = self._own_zk = ZooKeeperServer(os.path.join(self._workdir, "zookeeper")).start()
        self.zk_connect = zk.connect if isinstance(zk, ZooKeeperServer) else str(zk)
        from pybroker.controller.zk import ensure_chroot
        ensure_chroot(self.zk_connect, self.chroot, 30)

    @staticmethod
    def _parallel(fn, brokers) -> None:
        errors = []

        def run(b):
            try:
                fn(b)
            except Exception as exc:  # reported together below
                errors.append(exc)
        threads = [threading.Thread(target=run, args=(b,), daemon=True) for b in brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()  # each start is bounded by its own start_timeout
        if errors:
            raise EmbeddedBrokerError("brokers did not start:\n" + "\n".join(map(str, errors)))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers.values() if b.port is not None)

    def broker(self, broker_id: int) -> EmbeddedBroker:
        return self.brokers[broker_id]

    def start_broker(self, broker_id: int) -> EmbeddedBroker:
        return self.brokers[broker_id].start()

    def stop(self, broker_id: int, timeout: float = STOP_TIMEOUT) -> None:
        """A controlled shutdown of one broker (SIGTERM)."""
        self.brokers[broker_id].stop(timeout)

    def kill(self, broker_id: int) -> None:
        """kill -9 of one broker."""
        self.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> EmbeddedBroker:
        return self.brokers[broker_id].restart()

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None,
                     replication_factor: int = -1, timeout: float = 30.0) -> str:
        from pybroker.client import AdminClient, NewTopic
        with AdminClient({"bootstrap.servers": self.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(name, partitions, replication_factor, dict(config or {}))])
            wait_for_leaders(admin, name, timeout)
        return name

    def close(self) -> None:
        """Stop every broker (in parallel), then our own ZooKeeper; remove the temporary directory."""
        try:
            self._parallel(EmbeddedBroker.close, list(self.brokers.values()))
        finally:
            if self._own_zk is not None:
                self._own_zk.stop()
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
