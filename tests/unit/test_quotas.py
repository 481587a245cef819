"""Client quotas in-process: the windowed rate and which entity wins, with the throttle formula
(against real broker processes: tests/broker/test_quotas.py)."""
from pybroker.quota.entities import ANONYMOUS
from pybroker.quota.manager import ClientQuotaManager, WindowedRate


def test_windowed_rate_counts_at_least_samples_minus_one_windows():
    r = WindowedRate(11, 1.0)
    r.record(5_000, 100.0)
    rate, window = r.measure(100.5)
    assert window == 10.0 and rate == 500.0
    r.record(20_000, 112.0)  # the first bucket has left the window
    assert r.measure(112.5)[0] == 2_000.0


def test_most_specific_entity_wins_and_throttle_formula():
    m = ClientQuotaManager(11, 1.0, clock=lambda: 1000.0)
    m.set_all({(("client-id", None),): {"producer_byte_rate": 100.0},
               (("client-id", "a"),): {"producer_byte_rate": 1000.0},
               (("user", ANONYMOUS),): {"consumer_byte_rate": 50.0},
               (("client-id", "a"), ("user", ANONYMOUS)): {"request_percentage": 10.0}})
    assert m.quota_for("producer_byte_rate", ANONYMOUS, "a")[0] == 1000.0
    assert m.quota_for("producer_byte_rate", ANONYMOUS, "b")[0] == 100.0  # client-id default
    assert m.quota_for("consumer_byte_rate", ANONYMOUS, "b") == (50.0, ("consumer_byte_rate", ANONYMOUS, ""))
    assert m.quota_for("request_percentage", ANONYMOUS, "a")[0] == 10.0
    assert m.quota_for("request_percentage", ANONYMOUS, "b")[0] is None
    # a default client-id quota is measured per client-id
    assert m.quota_for("producer_byte_rate", ANONYMOUS, "b")[1] != m.quota_for("producer_byte_rate", ANONYMOUS, "c")[1]
    assert m.record("producer_byte_rate", ANONYMOUS, "b", 1000) == 0  # 100 B/s over 10 s: exactly at quota
    # 2000 B over a 10 s window = 200 B/s, twice the quota: (200 - 100) / 100 * 10 s
    assert m.record("producer_byte_rate", ANONYMOUS, "b", 1000) == 10_000
    assert m.record("producer_byte_rate", ANONYMOUS, "b", 10 ** 9) == 11_000  # capped at the whole window

