"""Memory of a real broker process: an idle single node stays small, and the log cleaner's dedupe buffer
(128 MiB by default) is taken for a cleaning and given back after it. Bounds, not timings."""
from tests.broker.test_compaction import (COMPACT, FAST_CLEANER, consume_all, latest_per_key, produce_keyed,
                                          push_out_of_active_segment, wait_cleaned)
from tests.clientutil import wait_until
from tests.kafka_wire import WireClient

IDLE_RSS_BOUND_KB = 40 * 1024  # an idle broker (and every embedded one in a user's tests) stays within 40 MiB
DEDUPE_BUFFER_KB = 128 * 1024  # log.cleaner.dedupe.buffer.size's default


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_an_idle_broker_stays_within_its_memory_bound(broker):
    assert rss_kb(broker.proc.pid) <= IDLE_RSS_BOUND_KB


def test_the_dedupe_buffer_is_given_back_after_each_cleaning(broker_factory):
    b = broker_factory(FAST_CLEANER)
    idle = rss_kb(b.proc.pid)
    assert idle <= IDLE_RSS_BOUND_KB
    with WireClient(b.port) as w:
        w.create_topic("compacted", 1, configs=COMPACT)
    acked = []
    for rnd in range(2):  # the second cleaning maps a new buffer after the first one's was unmapped
        acked += produce_keyed(b.bootstrap, "compacted", [(b"k%d" % (i % 20), b"r%d-v%d" % (rnd, i), [])
                                                          for i in range(500)])
        push_out_of_active_segment(b.bootstrap, "compacted")
        wait_cleaned(b, "compacted", acked[-1][0] + 1)

        def grown():  # the checkpoint is written before the cleaned segments are swapped in: the map lives on
            return rss_kb(b.proc.pid) - idle
        assert wait_until(lambda: grown() < DEDUPE_BUFFER_KB // 4, timeout=20), \
            f"RSS still {grown()} KiB above idle after cleaning {rnd}: the dedupe buffer is held"
    end = acked[-1][0] + 1
    got = [r for r in consume_all(b.bootstrap, "compacted", end) if r[0] < end and r[1].startswith(b"k")]
    assert len(got) < len(acked) / 5, f"{len(got)} records left of {len(acked)}: nothing was compacted"
    assert latest_per_key(got) == latest_per_key(acked)
