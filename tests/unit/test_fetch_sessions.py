"""The fetch session cache's rules in-process (KIP-227): creation, eviction, epochs, contexts
(a real broker and clients: tests/broker/test_fetch_sessions.py)."""
from pybroker.api.fetch_session import new_context
from pybroker.replica.fetch_session_client import FetchSessionClient
from pybroker.replica.fetch_sessions import CachedPartition, FetchSessionCache, next_epoch


def parts(n, topic="t"):
    return {(topic, i): CachedPartition(topic, None, i, 0, 1024) for i in range(n)}


def test_next_epoch_wraps_and_final_stays():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_cache_full_then_stale_session_evicted():
    cache = FetchSessionCache(max_entries=2, eviction_ms=1000)
    a = cache.maybe_create(False, parts(3), False, now=0)
    b = cache.maybe_create(False, parts(3), False, now=10)
    assert a and b and a != b and len(cache) == 2
    assert cache.maybe_create(False, parts(3), False, now=500) == 0  # full, nobody stale or old
    c = cache.maybe_create(False, parts(1), False, now=1200)  # a idle for > eviction_ms: it goes
    assert c and cache.get(a) is None and cache.get(b) is not None and cache.evictions == 1


def test_followers_evict_young_consumer_sessions_not_the_reverse():
    cache = FetchSessionCache(max_entries=1, eviction_ms=10_000)
    consumer = cache.maybe_create(False, parts(5), False, now=0)
    follower = cache.maybe_create(True, parts(1), False, now=1)  # privileged beats unprivileged
    assert follower and cache.get(consumer) is None
    assert cache.maybe_create(False, parts(100), False, now=2) == 0  # a young follower session stays


def test_old_sessions_evicted_by_size():
    cache = FetchSessionCache(max_entries=2, eviction_ms=100)
    small = cache.maybe_create(False, parts(2), False, now=0)
    big = cache.maybe_create(False, parts(50), False, now=0)
    for s in (small, big):  # both used recently, both older than eviction_ms
        cache.touch(cache.get(s), 150)
    assert cache.maybe_create(False, parts(1), False, now=160) == 0  # worth less than either
    new = cache.maybe_create(False, parts(10), False, now=170)  # worth more than the smaller one
    assert new and cache.get(small) is None and cache.get(big) is not None


def test_zero_slots_means_no_sessions():
    assert FetchSessionCache(max_entries=0).maybe_create(False, parts(1), False, now=0) == 0


class Res:
    def __init__(self, hw=5, lso=5, start=0, records=None, error=0, diverging=None):
        self.high_watermark, self.last_stable_offset, self.log_start_offset = hw, lso, start
        self.records, self.error, self.diverging_epoch, self.current_leader = records, error, diverging, None
        self.aborted_transactions = None


class Slice:
    def __init__(self, n):
        self.length = n


def request_partitions(n, offset=0):
    return [CachedPartition("t", None, i, offset, 1024) for i in range(n)]


def test_contexts_full_incremental_and_errors():
    cache = FetchSessionCache()
    full = new_context(cache, 12, 0, 0, False, ["topics"], request_partitions(4), [], None)
    topics, results, sid, error = full.respond([Res() for _ in range(4)])
    assert topics == ["topics"] and sid and error == 0 and len(cache.get(sid).partitions) == 4
    # epoch 1, nothing named: every partition is read, none has news
    inc = new_context(cache, 12, sid, 1, False, [], [], [], None)
    assert len(inc.partitions) == 4
    assert inc.respond([Res() for _ in range(4)])[1:] == ([], sid, 0)
    # epoch 2: partition 2 moved on and got records, partition 3 is forgotten
    inc = new_context(cache, 12, sid, 2, False, [], [CachedPartition("t", None, 2, 7, 1024)], [("t", 3)], None)
    assert [p.partition for p in inc.partitions] == [0, 1, 2] and inc.partitions[2].fetch_offset == 7
    topics, results, _, _ = inc.respond([Res(), Res(hw=9), Res(hw=9, records=Slice(10))])
    assert [(t.topic, [p.partition for p in t.partitions]) for t in topics] == [("t", [1, 2])]
    assert list(cache.get(sid).partitions) == [("t", 0), ("t", 1), ("t", 2)]  # 2 already last
    # the wrong epoch, an unknown id, topic ids against a name session
    assert new_context(cache, 12, sid, 2, False, [], [], [], None).respond([])[3] == 71
    assert new_context(cache, 12, 12345, 1, False, [], [], [], None).respond([])[3] == 70
    assert new_context(cache, 13, sid, 3, False, [], [], [], {}).respond([])[3] == 106
    # epoch -1 closes it
    new_context(cache, 12, sid, -1, False, [], [], [], None)
    assert cache.get(sid) is None


def test_partitions_with_records_go_to_the_back():
    cache = FetchSessionCache()
    sid = new_context(cache, 12, 0, 0, False, [], request_partitions(3), [], None).respond([Res()] * 3)[2]
    inc = new_context(cache, 12, sid, 1, False, [], [], [], None)
    inc.respond([Res(hw=6, records=Slice(5)), Res(), Res()])
    assert [k[1] for k in cache.get(sid).partitions] == [1, 2, 0]


def test_duplicate_request_in_flight_gets_invalid_epoch():
    cache = FetchSessionCache()
    sid = new_context(cache, 12, 0, 0, False, [], request_partitions(1), [], None).respond([Res()])[2]
    first = new_context(cache, 12, sid, 1, False, [], [], [], None)
    second = new_context(cache, 12, sid, 2, False, [], [], [], None)  # came before the first answered
    assert first.respond([Res()])[3] == 71 and second.respond([Res()])[3] == 0


def test_session_client_sends_only_changes():
    c = FetchSessionClient()
    assert c.build({"a": 1, "b": 2}) == (["a", "b"], []) and c.epoch == 0
    c.answered(0, 99)
    assert (c.session_id, c.epoch) == (99, 1)
    assert c.build({"a": 1, "b": 3}) == (["b"], [])
    c.answered(0, 99)
    assert c.build({"a": 1}) == ([], ["b"]) and c.epoch == 2
    c.answered(71, 0)  # a session error: full again, closing 99
    assert (c.session_id, c.epoch) == (99, 0) and c.build({"a": 1}) == (["a"], [])



def test_session_client_reset_while_a_request_is_in_flight():
    """An answer to a request sent before a reset does not revive the old session's view."""
    c = FetchSessionClient()
    c.build({"a": 1})
    c.answered(0, 99)
    c.build({"a": 1})  # in flight when the fetcher resets the session
    c.reset()
    c.answered(0, 99)
    assert c.full and c.build({"a": 1}) == (["a"], [])
