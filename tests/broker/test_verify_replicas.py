"""``pybroker verify-replicas`` and the debugging-consumer Fetch (replica id -2) on a single broker, and its
bad options (on a cluster: tests/cluster/test_verify_replicas.py)."""
from tests.cluster.test_verify_replicas import fetch, produce_batches, verify
from tests.kafka_wire import WireClient


def test_single_broker_verifies_and_serves_debugging_fetches(broker):
    with WireClient(broker.port) as c:
        c.create_topic("solo", 2)
        for p in (0, 1):
            produce_batches(c, "solo", p, 4)
        debug = fetch(c, "solo", 0, 0, -2)
        assert debug.error_code == 0 and debug.high_watermark == 20 and len(debug.records) > 0
    out = verify(broker.bootstrap, "--topics-include", "solo")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "max lag is 0 for partition solo-" in out.stdout and "among 2 partitions" in out.stdout
    assert "all replicas agree below the high watermark (2 partitions)" in out.stdout
    missing = verify(broker.bootstrap, "--topics-include", "no-such-.*")
    assert missing.returncode == 1 and "no topic matches 'no-such-.*'" in missing.stderr


def test_bad_options_are_refused(broker):
    out = verify(broker.bootstrap, "--topics-include", "(", "--time-limit-ms", "0")
    assert out.returncode == 1 and "bad --topics-include regular expression" in out.stderr
    out = verify(broker.bootstrap, "--fetch-size", "0")
    assert out.returncode == 1 and "--fetch-size must be positive" in out.stderr

