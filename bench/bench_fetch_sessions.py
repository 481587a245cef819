"""Fetch with and without a fetch session (KIP-227): bytes on the wire and broker CPU per fetch.

    python bench/bench_fetch_sessions.py [--partitions 1000] [--fetches 300] [--rounds 5] [--version 12] [--json]

One real broker (``pybroker serve``) with a topic of ``--partitions`` partitions, a few of which get
one record between fetches (``--busy``). A raw wire client sends Fetch requests (``--version``, 12 by
default: topics by name; 13+ by topic id) for all of them:
  sessionless   every request names every partition (session 0, epoch -1: what librdkafka sends)
  session       one full fetch opens a session, then incremental requests carry only the partitions
                whose fetch offset moved; responses carry only partitions with news
Both modes run in the same broker, alternating per round. Per fetch: request bytes, response bytes,
broker CPU (utime + stime of the broker process from /proc, so the client's own work is excluded)
and the client's round trip; medians over rounds and session/sessionless ratios. The broker CPU
includes the ``--busy`` produce requests between fetches; a third mode runs those produces alone
(no fetch) so that their share can be taken out: ``net CPU`` is broker CPU minus that share.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pybroker.protocol import decode_response  # noqa: E402
from pybroker.protocol.messages import REQUESTS  # noqa: E402
from pybroker.records import Record, build_batch  # noqa: E402
from tests.broker import BrokerProcess  # noqa: E402
from tests.kafka_wire import SIZE, WireClient  # noqa: E402

Fetch = REQUESTS[1]
TOPIC = "wide"


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Fetcher:
    """A consumer's fetch loop over raw wire requests, with or without a session."""

    def __init__(self, client: WireClient, partitions: int, session: bool, version: int = 12, topic_id=None):
        self.w, self.session, self.version, self.topic_id = client, session, version, topic_id
        self.offsets = {i: 0 for i in range(partitions)}
        self.sent = {}
        self.session_id, self.epoch = 0, (0 if session else -1)

    def request(self):
        if self.session and self.epoch > 0:
            changed = {i: o for i, o in self.offsets.items() if self.sent.get(i) != o}
        else:
            changed = dict(self.offsets)
        self.sent.update(changed)
        return Fetch(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=50 << 20, isolation_level=0,
                     session_id=self.session_id, session_epoch=self.epoch, rack_id="", forgotten_topics_data=[],
                     topics=[Fetch.FetchTopic(topic=TOPIC, topic_id=self.topic_id, partitions=[
                         Fetch.FetchPartition(partition=i, fetch_offset=o, partition_max_bytes=1 << 20)
                         for i, o in changed.items()])] if changed else [])

    def fetch_once(self) -> tuple[int, int]:
        """(request bytes, response bytes) of one fetch; offsets move past what came back."""
        _, body = self.w.encode(1, self.version, self.request())
        self.w.send_frame(body)
        frame = self.w.recv_frame()
        _, resp = decode_response(frame, 1, self.version)
        assert resp.error_code == 0, resp.error_code
        if self.session:
            self.session_id, self.epoch = resp.session_id, self.epoch + 1
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code:  # an erroring partition is answered in every response: no figure then
                    raise RuntimeError(f"partition {p.partition_index} answered error {p.error_code}")
                if p.records is not None and len(p.records):
                    self.offsets[p.partition_index] = p.high_watermark
        return SIZE.size + len(body), SIZE.size + len(frame)


def wait_leaders(fetcher, timeout_s: float = 30) -> None:
    """Until a sessionless fetch of every partition answers without an error (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fetcher.fetch_once()
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def run_mode(b, partitions, fetches, busy, mode, batch, version, topic_id):
    with WireClient(b.port) as w, WireClient(b.port) as producer:
        f = Fetcher(w, partitions, mode == "session", version, topic_id)
        f.fetch_once()  # the full fetch (and the session) before measuring
        req = resp = 0
        rtt = []
        cpu0 = cpu_s(b.proc.pid)
        for n in range(fetches):
            for k in range(busy):  # a few partitions get news between fetches
                producer.produce(TOPIC, (n * busy + k) * 7919 % partitions, batch, acks=1)
            t = time.perf_counter()
            if mode == "produces only":
                rtt.append(0.0)
                continue
            a, c = f.fetch_once()
            rtt.append(time.perf_counter() - t)
            req += a
            resp += c
        cpu = cpu_s(b.proc.pid) - cpu0
    # the few produce requests between fetches count in the broker's CPU alike in both modes
    return {"request_bytes": req / fetches, "response_bytes": resp / fetches, "broker_cpu_us": cpu / fetches * 1e6,
            "rtt_us": statistics.median(rtt) * 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--fetches", type=int, default=300)
    ap.add_argument("--busy", type=int, default=2, help="partitions that get a record between fetches")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--version", type=int, default=12, help="Fetch version (12-17)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    batch = bytes(build_batch([Record(value=b"x" * 100, timestamp=1_700_000_000_000)],
                              base_timestamp=1_700_000_000_000))
    rows = {"sessionless": [], "session": [], "produces only": []}
    with tempfile.TemporaryDirectory() as base:
        b = BrokerProcess(os.path.join(base, "data"), {"log.flush.interval.messages": "9223372036854775807"}).start()
        try:
            with WireClient(b.port, timeout=300) as w:  # creating 1000 partitions takes a while
                w.create_topic(TOPIC, partitions=args.partitions)
                topic_id = w.metadata([TOPIC], version=12).topics[0].topic_id
                wait_leaders(Fetcher(w, args.partitions, False, args.version, topic_id))
            for _ in range(args.rounds):
                for mode in rows:
                    rows[mode].append(run_mode(b, args.partitions, args.fetches, args.busy, mode, batch,
                                               args.version, topic_id))
        finally:
            b.stop()
            b.close()
    med = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in rows.items()}
    produces = med.pop("produces only")["broker_cpu_us"]
    for m in med.values():
        m["net_cpu_us"] = m["broker_cpu_us"] - produces
    ratios = {k: med["session"][k] / med["sessionless"][k] for k in med["session"]}
    if args.json:
        print(json.dumps({"median": med, "session_over_sessionless": ratios, "args": vars(args),
                          "produces_only_cpu_us": produces,
                          "load_average": os.getloadavg()[0]}, indent=2))
        return
    print(f"Fetch v{args.version}, {args.partitions} partitions, {args.busy} with news per fetch, "
          f"{args.fetches} fetches x {args.rounds} rounds (medians), load average {os.getloadavg()[0]:.1f}")
    print(f"{'':14}{'request B':>12}{'response B':>12}{'broker CPU us':>15}{'net CPU us':>12}{'RTT us':>10}")
    for mode in ("sessionless", "session"):
        m = med[mode]
        print(f"{mode:14}{m['request_bytes']:12.0f}{m['response_bytes']:12.0f}{m['broker_cpu_us']:15.0f}"
              f"{m['net_cpu_us']:12.0f}{m['rtt_us']:10.0f}")
    print(f"{'ratio':14}{ratios['request_bytes']:12.3f}{ratios['response_bytes']:12.3f}"
          f"{ratios['broker_cpu_us']:15.3f}{ratios['net_cpu_us']:12.3f}{ratios['rtt_us']:10.3f}")
    print(f"(the {args.busy} produces alone between fetches: {produces:.0f} us of broker CPU per fetch)")


if __name__ == "__main__":
    main()
