"""The brokers the transaction tests run against: Apache Kafka 3.8 (the oracle) and ``pybroker serve``.

Both are single nodes on 127.0.0.1 with one fixed port, so that a broker killed with SIGKILL comes
back at the same address on the same data dir. Kafka runs in KRaft mode from
``~/.cache/pybroker-kafka/kafka_2.13-3.8.0``; a test that needs it skips when it is absent.
"""
import os
import subprocess

import pytest

from tests.broker import BrokerProcess
from tests.cluster import Cluster, answers_requests, free_ports
from tests.kafka_wire import WireClient

KAFKA_HOME = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "pybroker-kafka", "kafka_2.13-3.8.0")
KAFKA_START_S = 120
END_TXN = 26
# settings both brokers take by Kafka's names: small internal topics, quick timeouts for the tests
TXN_SETTINGS = {
    "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 3,
    "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    "num.partitions": 1,
}


def kafka_available() -> bool:
    return os.path.isfile(os.path.join(KAFKA_HOME, "bin", "kafka-server-start.sh"))


def pybroker_supports_transactions() -> bool:
    """ApiVersions (derived from this table) advertises EndTxn."""
    from pybroker.api import TABLE
    return END_TXN in TABLE


class KafkaBroker:
    """One KRaft Kafka 3.8 process (broker and controller), PLAINTEXT on a fixed port."""

    name = "kafka"

    def __init__(self, base_dir: str, overrides: dict | None = None):
        self.base_dir = base_dir
        self.port, self.controller_port = free_ports(2)
        self.data_dir = os.path.join(base_dir, "kafka-data")
        self.log_path = os.path.join(base_dir, "kafka.out")
        settings = {**TXN_SETTINGS, **(overrides or {})}
        lines = ["process.roles=broker,controller", "node.id=1",
                 f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                 f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                 f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                 "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
                 "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                 f"log.dirs={self.data_dir}", *(f"{k}={v}" for k, v in settings.items())]
        os.makedirs(base_dir, exist_ok=True)
        self.props = os.path.join(base_dir, "kafka.properties")
        with open(self.props, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.env = {**os.environ, "LOG_DIR": os.path.join(base_dir, "kafka-logs"),
                    "KAFKA_HEAP_OPTS": "-Xmx512M -Xms512M"}
        subprocess.run([os.path.join(KAFKA_HOME, "bin", "kafka-storage.sh"), "format", "-t",
                        "txn-test-cluster-0001", "-c", self.props], check=True, capture_output=True,
                       env=self.env, timeout=KAFKA_START_S)
        self.proc = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "KafkaBroker":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([os.path.join(KAFKA_HOME, "bin", "kafka-server-start.sh"), self.props],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            Cluster.wait_for(lambda: self.alive() and _answers(self.port), KAFKA_START_S, "Kafka to listen",
                             interval=0.2)
        except BaseException:
            self.kill()
            raise
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(60)

    def restart(self) -> "KafkaBroker":
        return self.start()

    def stderr(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def close(self) -> None:
        self.kill()


class PyBroker:
    """``pybroker serve`` with TXN_SETTINGS on a fixed port; restarts on the same data dir."""

    name = "pybroker"

    def __init__(self, base_dir: str, overrides: dict | None = None):
        port, = free_ports(1)
        os.makedirs(base_dir, exist_ok=True)
        self.process = BrokerProcess(os.path.join(base_dir, "pybroker-data"),
                                     {**TXN_SETTINGS, **(overrides or {})}, port)

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def proc(self):
        return self.process.proc

    def start(self) -> "PyBroker":
        self.process.start()
        versions = {k.api_key for k in WireClient(self.process.port).api_versions().api_keys}
        if END_TXN not in versions:
            self.close()
            pytest.skip("pybroker does not advertise EndTxn (API 26) in ApiVersions yet")
        return self

    def alive(self) -> bool:
        return self.process.alive()

    def kill(self) -> None:
        self.process.kill()

    def restart(self) -> "PyBroker":
        self.process.close()
        self.process.start()
        return self

    def stderr(self) -> str:
        return self.process.stderr()

    def close(self) -> None:
        self.process.close()


def _answers(port: int) -> bool:
    try:
        answers_requests(port, timeout=2)
        return True
    except Exception:  # refused, reset or closed: not serving yet
        return False


def start_target(name: str, base_dir: str, overrides: dict | None = None):
    """A started broker of kind ``name`` ("kafka" or "pybroker"), or a skip saying why not."""
    if name == "kafka":
        if not kafka_available():
            pytest.skip(f"Apache Kafka 3.8 is not installed at {KAFKA_HOME}")
        return KafkaBroker(base_dir, overrides).start()
    if not pybroker_supports_transactions():
        pytest.skip("pybroker does not advertise EndTxn (API 26) in ApiVersions yet")
    return PyBroker(base_dir, overrides).start()
