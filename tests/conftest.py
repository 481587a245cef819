import pytest

from tests.broker import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    """A running broker with its own data dir; stopped (SIGTERM, then SIGKILL) after the test."""
    b = BrokerProcess(str(tmp_path / "data")).start()
    yield b
    try:
        b.stop()
    finally:
        b.close()


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers with overrides: ``broker_factory(overrides=..., data_dir=...)``; all cleaned up."""
    started = []

    def make(overrides=None, data_dir=None, port=0):
        b = BrokerProcess(data_dir or str(tmp_path / f"data{len(started)}"), overrides, port).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.close()
