"""``pybroker verify-replicas``: kafka-replica-verification.sh.

Every replica of the chosen partitions is read with Kafka's debugging-consumer Fetch (replica id
-2), which leaders and followers both answer, up to that replica's own log end and with its own
high watermark (HW). The replicas' batches are walked in lockstep and compared by (base offset,
last offset, CRC) below the smallest HW of the replicas read: committed data, which every replica
holds byte for byte. Each pass also notes how far each replica's log reaches; the lag of a
partition is the furthest replica's end minus the nearest one's.

``--time-limit-ms 0`` (the default) makes one pass up to the HWs seen at its start and exits;
otherwise passes repeat (the next one resumes where the last left off) until the time limit, with
a lag line every ``--report-interval-ms``. Exit status 1 when replicas disagree or a replica could
not be read; each case is named on stdout.
"""
import re
import struct
import sys
import time
from collections import deque

from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode
from pybroker.tools.wire import FETCH, Client, ToolError, split_batches

DEBUGGING_CONSUMER_ID = -2
# base offset, batch length, partition leader epoch, magic, CRC, attributes, last offset delta
_BATCH_HEAD = struct.Struct(">qiibIhi")
MAX_PENDING = 50_000  # batch headers held per replica ahead of the verified offset
IDLE_PASS_S = 0.1  # the least a pass that read nothing takes (with --max-wait-ms 0)
INT32_MAX = 2**31 - 1


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class PartitionCheck:
    """One partition's replicas: what has been verified, and each replica's batches beyond it."""

    def __init__(self, topic: str, partition: int, replicas: tuple, leader: int):
        self.topic, self.partition, self.replicas, self.leader = topic, partition, replicas, leader
        self.name = f"{topic}-{partition}"
        self.position = 0  # every replica agrees below this offset (or it is below their log starts)
        self.cursor = {r: 0 for r in replicas}  # next offset to fetch from each replica
        self.pending = {r: deque() for r in replicas}  # (base, last, crc) read, not yet compared
        self.diverged = False  # batch boundaries differ: lockstep is impossible beyond position
        self.hw: dict[int, int] = {}  # each replica's HW as it last answered
        self.start_pass()

    def start_pass(self) -> None:
        self.at_end = {r: False for r in self.replicas}
        self.failed: dict[int, str] = {}
        self.stop: int | None = None  # fetch no further this pass: the largest HW seen at its start
        for r in self.replicas:  # a replica unreadable last pass starts over from the verified offset
            if self.cursor[r] < self.position or (self.pending[r] and self.pending[r][0][1] < self.position):
                self.pending[r].clear()
                self.cursor[r] = self.position

    def wants(self, r: int) -> bool:
        return (not self.diverged and r not in self.failed and not self.at_end[r]
                and len(self.pending[r]) < MAX_PENDING and (self.stop is None or self.cursor[r] < self.stop))

    def fail(self, r: int, why: str) -> None:
        self.failed[r] = why

    def move_start(self, offset: int) -> None:
        """A replica's log starts at ``offset``: nothing below it can be compared."""
        self.position = max(self.position, offset)
        for r in self.replicas:
            q = self.pending[r]
            while q and q[0][1] < self.position:
                q.popleft()
            self.cursor[r] = max(self.cursor[r], self.position)

    def take(self, r: int, data) -> None:
        """One replica's answer for this partition."""
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and data.log_start_offset > self.cursor[r]:
            self.move_start(data.log_start_offset)
            self.hw[r] = data.high_watermark
            return
        if data.error_code:
            name = _error_name(data.error_code)
            hint = (" (does this broker serve debugging fetches from followers?)"
                    if data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER else "")
            self.fail(r, f"{name} fetching offset {self.cursor[r]}{hint}")
            return
        self.hw[r] = data.high_watermark
        records = data.records
        batches = split_batches(records)
        if not batches:
            if records is not None and len(records):
                self.fail(r, f"the batch at offset {self.cursor[r]} is larger than --fetch-size")
            else:
                self.at_end[r] = True  # a debugging fetch answers nothing only at the log end
            return
        moved = False
        for batch in batches:
            base, _, _, magic, crc, _, delta = _BATCH_HEAD.unpack_from(batch, 0)
            last = base + delta
            if magic != 2:
                self.fail(r, f"a message set with magic {magic} at offset {base}: only record batches are compared")
                return
            if last < self.cursor[r]:
                continue
            self.pending[r].append((base, last, crc))
            self.cursor[r] = last + 1
            moved = True
        if not moved:
            self.fail(r, f"the fetch at offset {self.cursor[r]} returned no batch at or after it")

    def readable(self) -> list:
        return [r for r in self.replicas if r not in self.failed]

    def compare(self, report) -> None:
        """Verify the batches every readable replica has, below all of their HWs."""
        live = [r for r in self.readable() if r in self.hw]
        if self.diverged or not live:
            return
        bound = min(self.hw[r] for r in live)
        ref_r = self.leader if self.leader in live else live[0]
        while all(self.pending[r] for r in live):
            ref = self.pending[ref_r][0]
            if ref[1] >= bound:
                return
            for r in live:
                base, last, crc = self.pending[r][0]
                if (base, last) != ref[:2]:
                    report(f"Partition {self.name}: replica {r}'s batch at offset {base} (last offset {last}) "
                           f"does not line up with replica {ref_r}'s batch at offset {ref[0]} (last offset "
                           f"{ref[1]}); the replicas diverge, {self.name} is not verified beyond it")
                    self.diverged = True
                    return
                if crc != ref[2]:
                    report(f"Partition {self.name}: replica {r}'s batch at offset {base} has crc {crc} "
                           f"while replica {ref_r}'s has crc {ref[2]}")
            for r in live:
                self.pending[r].popleft()
            self.position = ref[1] + 1

    def lag(self) -> tuple[int, int] | None:
        """(lag, the nearest replica's end) as read this pass; None when no replica was read."""
        ends = [self.cursor[r] for r in self.readable()]
        if not ends:
            return None
        return max(ends) - min(ends), min(ends)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def select(client: Client, pattern: str) -> tuple[list, list]:
    """PartitionChecks for the topics ``pattern`` matches (whole names, internal topics too),
    and errors for topics the metadata could not describe."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"bad --topics-include regular expression {pattern!r}: {exc}") from None
    meta = client.metadata(None)
    checks, errors = [], []
    for t in sorted(meta.topics, key=lambda t: t.name):
        if not regex.fullmatch(t.name):
            continue
        if t.error_code:
            errors.append(f"Topic {t.name}: {_error_name(t.error_code)} in the metadata; it is not verified")
            continue
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            checks.append(PartitionCheck(t.name, p.partition_index, tuple(p.replica_nodes), p.leader_id))
    return checks, errors


class Verifier:
    def __init__(self, client: Client, checks: list, args, out=sys.stdout):
        self.client, self.checks, self.args, self.out = client, checks, args, out
        self.by_key = {(c.topic, c.partition): c for c in checks}
        self.mismatches = 0
        self.unreadable: set = set()
        self.worst = None  # the max lag since the last report: (lag, partition, offset)

    def report(self, line: str) -> None:
        self.mismatches += 1
        print(line, file=self.out, flush=True)

    def run_pass(self, wait: bool, deadline: float | None) -> bool:
        """Fetch and compare until every replica reached its end or the HWs seen at the start;
        True when anything was read. Each round moves a cursor, ends a replica or fails it.
        ``wait``: the first round long-polls (--max-wait-ms) for new data."""
        for c in self.checks:
            c.start_pass()
        first, read_any = True, False
        while deadline is None or time.monotonic() < deadline:
            wanted: dict[int, list] = {}
            for c in self.checks:
                for r in c.replicas:
                    if c.wants(r):
                        wanted.setdefault(r, []).append(c)
            if not wanted:
                break
            for broker, checks in sorted(wanted.items()):
                read_any |= self.fetch(broker, checks, wait and first)
            for c in self.checks:
                if first:  # bounds the pass even while producers keep writing
                    c.stop = max(c.hw.values(), default=0)
                c.compare(self.report)
            first = False
        lag = self.max_lag()
        if lag is not None and (self.worst is None or lag[0] > self.worst[0]):
            self.worst = lag
        for c in self.checks:
            for r, why in sorted(c.failed.items()):
                if (c.name, r, why) not in self.unreadable:
                    self.unreadable.add((c.name, r, why))
                    print(f"Partition {c.name}: replica {r} could not be read: {why}", file=self.out, flush=True)
        return read_any

    def fetch(self, broker: int, checks: list, wait: bool) -> bool:
        """One debugging Fetch to ``broker`` for its replicas of ``checks``."""
        if broker not in self.client.brokers:
            for c in checks:
                c.fail(broker, f"broker {broker} is not alive (not in the metadata)")
            return False
        api, size = REQUESTS[FETCH], self.args.fetch_size
        topics: dict[str, list] = {}
        for c in checks:
            topics.setdefault(c.topic, []).append(api.FetchPartition(
                partition=c.partition, current_leader_epoch=-1, fetch_offset=c.cursor[broker],
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=size))
        req = api(replica_id=DEBUGGING_CONSUMER_ID, max_wait_ms=self.args.max_wait_ms if wait else 0,
                  min_bytes=1 if wait else 0, max_bytes=min(size * len(checks), INT32_MAX),
                  isolation_level=0, session_id=0, session_epoch=-1,
                  topics=[api.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
                  forgotten_topics_data=[], rack_id="")
        conn = None
        try:
            conn = self.client.node_conn(broker)
            resp = conn.request(req)
        except ToolError as exc:
            if conn is not None:
                self.client.drop(conn)
            for c in checks:
                c.fail(broker, str(exc))
            return False
        if resp.error_code:
            for c in checks:
                c.fail(broker, f"{_error_name(resp.error_code)} for the whole fetch")
            return False
        asked = {(c.topic, c.partition) for c in checks}
        answered, read = set(), False
        for t in resp.responses:
            for data in t.partitions:
                key = (t.topic, data.partition_index)
                if key not in asked or key in answered:
                    continue
                answered.add(key)
                c = self.by_key[key]
                before = c.cursor[broker]
                c.take(broker, data)
                read |= c.cursor[broker] != before
        for c in checks:
            if (c.topic, c.partition) not in answered:
                c.fail(broker, "the broker did not answer for this partition")
        return read

    def max_lag(self) -> tuple[int, str, int] | None:
        worst = None
        for c in self.checks:
            lag = c.lag()
            if lag is not None and (worst is None or lag[0] > worst[0]):
                worst = (lag[0], c.name, lag[1])
        return worst

    def print_lag(self) -> None:
        worst, self.worst = self.worst, None
        if worst is None:
            print(f"{now()}: no replica could be read", file=self.out, flush=True)
        else:
            print(f"{now()}: max lag is {worst[0]} for partition {worst[1]} at offset {worst[2]} "
                  f"among {len(self.checks)} partitions", file=self.out, flush=True)


def run(args) -> int:
    for name in ("fetch_size", "report_interval_ms"):
        if getattr(args, name) <= 0:
            raise ToolError(f"--{name.replace('_', '-')} must be positive")
    if args.max_wait_ms < 0 or args.time_limit_ms < 0:
        raise ToolError("--max-wait-ms and --time-limit-ms must not be negative")
    with Client(args.bootstrap_server, args.command_timeout_ms) as client:
        checks, errors = select(client, args.topics_include)
        for line in errors:
            print(line)
        if not checks:
            raise ToolError(f"no partitions to verify: no topic matches {args.topics_include!r}")
        v = Verifier(client, checks, args)
        print(f"{now()}: verifying {len(checks)} partitions of "
              f"{len({c.topic for c in checks})} topics", flush=True)
        if args.time_limit_ms == 0:
            v.run_pass(wait=False, deadline=None)
            v.print_lag()
        else:
            end = time.monotonic() + args.time_limit_ms / 1000
            next_report = time.monotonic() + args.report_interval_ms / 1000
            idle = False
            while time.monotonic() < end:
                started = time.monotonic()
                idle = not v.run_pass(wait=idle, deadline=end)
                if idle:  # nothing new: the next pass long-polls; never spin with --max-wait-ms 0
                    time.sleep(max(0.0, min(IDLE_PASS_S - (time.monotonic() - started), end - time.monotonic())))
                if time.monotonic() >= next_report:
                    v.print_lag()
                    next_report += args.report_interval_ms / 1000
            if v.worst is not None:  # the passes since the last report
                v.print_lag()
    failed = len(v.unreadable) + len(errors)
    if v.mismatches or failed:
        print(f"FAILED: {v.mismatches} mismatch(es), {failed} unreadable replica(s) or topic(s)")
        return 1
    print(f"all replicas agree below the high watermark ({len(checks)} partitions)")
    return 0
