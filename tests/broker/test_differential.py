"""The same request sequences sent to Kafka 3.8 (one KRaft broker) and to one pybroker broker: every
client-facing API, error paths included, answers compared field by field (tests/differential.py).

Skipped where Kafka 3.8 is not built (``~/.cache/pybroker-kafka``, see the project's tools for measuring
pybroker against Kafka). A failing case prints the table of its differences.
"""
import pytest

from tests.broker import BrokerProcess
from tests.differential import (COMMON_SETTINGS, KAFKA_HOME, Target, check, kafka_available, run_case,
                                start_kafka_kraft)
from tests.differential_cases import SINGLE

pytestmark = pytest.mark.skipif(not kafka_available(), reason=f"Apache Kafka 3.8 is not built at {KAFKA_HOME}")

SETTINGS = {**COMMON_SETTINGS, "offsets.topic.replication.factor": 1, "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1}


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    base = tmp_path_factory.mktemp("differential")
    pybroker = BrokerProcess(str(base / "pybroker-data"), {**SETTINGS, "broker.id": 1}).start()
    kafka = None
    try:
        # Kafka 3.8 serves the consumer group protocol (KIP-848) only when asked to; pybroker always does
        kafka = start_kafka_kraft(str(base), {**SETTINGS, "group.coordinator.rebalance.protocols": "classic,consumer"})
        yield Target("kafka", {1: kafka.port}), Target("pybroker", {1: pybroker.port})
    finally:
        if kafka is not None:
            kafka.kill()
        pybroker.close()


@pytest.mark.parametrize("case", SINGLE, ids=lambda c: c.name)
def test_same_answers_as_kafka(sides, case):
    check(run_case(case, *sides), "single")
