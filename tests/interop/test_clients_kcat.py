"""kcat (librdkafka 2.0 CLI) against a real broker: topics auto-created by producing, every acks
level and codec, idempotence, reads from the beginning / an offset / a timestamp (-o s@ts, -Q)."""
import json
import subprocess
import time

import pytest

from tests.clientutil import (DEADLINE, MODES, Rec, check_arrived_intact, check_key_partitioning,
                              finish_broker, first_offset_at_or_after, start_broker)

PER_RUN = 60
HEADERS = (("h1", b"v1"), ("src", b"kcat"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory, "kcat", {"num.partitions": 3})  # kcat creates topics by producing
    yield b
    finish_broker(b)


def kcat(b, *args, stdin: bytes | None = None) -> str:
    r = subprocess.run(["kcat", "-b", b.bootstrap, "-m", "10", *args], input=stdin, capture_output=True,
                       timeout=DEADLINE)
    assert r.returncode == 0 and b"ERROR" not in r.stderr, (args, r.returncode, r.stderr.decode()[-2000:])
    return r.stdout.decode()


def produce(b, topic, lines: list[tuple[str, str]], *opts):
    """kcat -P with key<TAB>value lines and fixed headers; exit 0 and no ERROR = all delivered."""
    data = "".join(f"{k}\t{v}\n" for k, v in lines).encode()
    kcat(b, "-P", "-t", topic, "-K", "\t", "-H", "h1=v1", "-H", "src=kcat", *opts, stdin=data)


def consume(b, topic, *opts) -> list[Rec]:
    """kcat -C ... -e -J: everything from the given start to the end, as Recs."""
    out = kcat(b, "-C", "-t", topic, "-e", "-J", "-q", *opts)
    recs = []
    for line in out.splitlines():
        m = json.loads(line)
        h = m.get("headers") or []
        headers = tuple((h[i], h[i + 1].encode()) for i in range(0, len(h), 2))
        recs.append(Rec(m["partition"], m["offset"], m["key"].encode(), m["payload"].encode(), headers, m["ts"]))
    return recs


def ordered(recs):
    return sorted(recs, key=lambda r: (r.partition, r.offset))


@pytest.mark.parametrize("name,acks,codec,idempotent", MODES, ids=[m[0] for m in MODES])
def test_produce_and_read_back(broker, name, acks, codec, idempotent):
    topic = f"kc-{name}"
    opts = ["-X", f"acks={acks}"] + (["-z", codec] if codec else []) + (
        ["-X", "enable.idempotence=true"] if idempotent else [])
    sent = [(f"key-{i % 12}", f"{topic}-{i}") for i in range(2 * PER_RUN)]
    produce(broker, topic, sent[:PER_RUN], *opts)
    time.sleep(0.05)  # the second run gets later timestamps
    produce(broker, topic, sent[PER_RUN:], *opts)

    md = json.loads(kcat(broker, "-L", "-J", "-t", topic))
    assert [len(t["partitions"]) for t in md["topics"] if t["topic"] == topic] == [3]  # auto-created, 3 partitions

    got = consume(broker, topic, "-o", "beginning")
    # kcat reports no offsets: exit status 0 without delivery errors means all were acked (acks=0:
    # sent), and on one healthy broker all arrive: once each, intact, per partition in send order
    check_arrived_intact({v.encode(): (k.encode(), HEADERS) for k, v in sent}, got)
    assert sorted(r.value for r in got) == sorted(v.encode() for _, v in sent)
    for p in range(3):
        assert [r.offset for r in got if r.partition == p] == list(range(sum(r.partition == p for r in got)))
    check_key_partitioning(got)

    for p in range(3):  # from a given offset
        mine = [r for r in got if r.partition == p]
        start = len(mine) // 2
        assert consume(broker, topic, "-p", str(p), "-o", str(start)) == mine[start:]

    ts = min(r.timestamp for r in got if int(r.value.rsplit(b"-", 1)[1]) >= PER_RUN)  # the second run
    want = ordered(r for r in got if r.offset >= first_offset_at_or_after(got, r.partition, ts) >= 0)
    assert 0 < len(want) < len(got)
    assert ordered(consume(broker, topic, "-o", f"s@{ts}")) == want
    query = json.loads(kcat(broker, "-Q", "-J", *sum((["-t", f"{topic}:{p}:{ts}"] for p in range(3)), [])))
    for p in range(3):
        want_offset = first_offset_at_or_after(got, p, ts)
        # librdkafka turns "no such record" (-1) into the end offset
        assert query[topic][str(p)]["offset"] in ((want_offset,) if want_offset >= 0 else
                                                  (-1, sum(r.partition == p for r in got)))


def test_fetch_long_poll_wakes_on_produce(broker):
    """kcat parked at the end (fetch wait 20 s) exits with a record produced later."""
    topic = "kc-longpoll"
    produce(broker, topic, [("k", "first")], "-p", "0")
    reader = subprocess.Popen(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "1", "-c", "1",
                               "-q", "-X", "fetch.wait.max.ms=20000", "-f", "%o %s\\n"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        assert reader.poll() is None  # still waiting: nothing at offset 1 yet
        produce(broker, topic, [("k", "late")], "-p", "0")
        out, err = reader.communicate(timeout=15)  # under the 20 s fetch wait: the append woke it
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 0, err
    assert out.decode().split() == ["1", "late"]
