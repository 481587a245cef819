"""Follower side of replication: one fetcher per (leader broker, fetcher slot) pulling all its partitions.

A partition added to a fetcher must find where its log diverges from the leader's, never cutting
at its high watermark (KIP-101/279). A leader that speaks Fetch v12+ tells it (KIP-320, as Kafka's
followers use it): each fetch carries the epoch of the partition's last batch, and a leader whose
log ended that epoch earlier answers a diverging epoch, where the follower cuts its log and fetches
on. An older leader is asked first with OffsetForLeaderEpoch where the latest epoch ended (also
used when the leader says our fetch offset is past its log). While it truncates a partition is
left out of the fetches, and so out of the fetch session; one whose answer was dropped leaves the
session for one request, so that the leader answers it in full (high watermark included) when it
comes back. The fetcher sends Fetch with replica_id = this broker and appends the
returned batches as they are. A fenced epoch (ours is older) drops the partition until the
controller's newer word arrives. NOT_LEADER_OR_FOLLOWER or an unknown partition only rests the
partition for replica.fetch.backoff.ms, as Kafka does: a restarted leader says so until its own
LeaderAndIsr arrives, and that may repeat the leader and epoch we already follow, which starts no
new fetch. Connection failures back off and reconnect. Fetches go in a fetch session (KIP-227,
pybroker/replica/fetch_session_client.py): after the first, a request names only the partitions
whose fetch offset, log start or epoch moved; topics go by id (Fetch v13+) when all have one.
"""
import asyncio
import logging
import struct

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.errors import (FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE,
                                      UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION)
from pybroker.protocol.messages import REQUESTS
from pybroker.protocol.primitives import ZERO_UUID
from pybroker.replica.fetch_session_client import SESSION_ERRORS, FetchSessionClient
from pybroker.replica.throttle import ReplicationQuota, is_throttled
from pybroker.security.inter_broker import inter_broker_security

log = logging.getLogger(__name__)

FETCH, FETCH_MIN_VERSION, FETCH_MAX_VERSION = 1, 4, 17
FIRST_DIVERGING_VERSION, FIRST_TOPIC_ID_VERSION, FIRST_REPLICA_STATE_VERSION = 12, 13, 15
EPOCH_KEY, EPOCH_VERSION = 23, 3
_HEAD = struct.Struct(">qi")
THROTTLE_WAIT_S = 0.1


def truncation_offset(p, leader_epoch: int, leader_end: int) -> tuple[int, bool]:
    """Where to cut ``p``'s log given the leader's end offset of ``leader_epoch`` (as Kafka's
    follower): (offset, whether that settles it). An epoch we never had cuts to where our older
    epoch ended, and the leader is asked again."""
    log_end = p.log_end_offset
    if leader_end < 0:  # the leader knows no epochs: Kafka's fallback
        return min(p.high_watermark, log_end), True
    epoch, mine = p.end_offset_for_epoch(leader_epoch)
    if epoch < 0:  # we track no epoch that old
        return min(leader_end, log_end), True
    if epoch != leader_epoch:
        return min(mine, log_end), False
    return min(mine, leader_end, log_end), True


def whole_batches(records):
    """The leading whole batches of a fetched slice (the leader may cut the last one at max bytes),
    writable: the append path writes offsets into the batches it is given. A large response arrives
    in a receive buffer of its own, so its slice is used in place; a small one is copied."""
    view = memoryview(records).cast("B")
    pos = 0
    while pos + 12 <= len(view):
        size = _HEAD.unpack_from(view, pos)[1] + 12
        if pos + size > len(view):
            break
        pos += size
    return view[:pos] if not view.readonly else bytearray(view[:pos])


class ReplicaFetcher:
    def __init__(self, manager, leader_id: int, address: tuple):
        self.manager = manager
        self.leader_id = leader_id
        self.address = address
        self.partitions: dict = {}   # (topic, partition) -> Partition
        self.truncating: set = set()  # keys that truncate through OffsetForLeaderEpoch before fetching again
        self.unchecked: set = set()  # keys added since the last fetch: how they truncate depends on the leader
        self.rejoin: set = set()  # keys whose answer was dropped: out of the session for one request
        self.resting: dict = {}  # key -> loop time before which it is not fetched (the leader refused it)
        self.conn = None
        self.task = None
        self.session = FetchSessionClient()  # KIP-227: steady-state fetches name only what changed
        self.topic_ids: dict = {}  # topic -> id, kept after removal: forgotten partitions are named by id
        self._wakeup = asyncio.Event()

    def add(self, partitions) -> None:
        for p in partitions:
            key = (p.topic, p.index)
            if self.topic_ids.get(p.topic, p.topic_id) != p.topic_id:
                self.session.reset()  # the topic was recreated: the leader's session holds the old id
            self.partitions[key] = p
            self.topic_ids[p.topic] = p.topic_id
            self.unchecked.add(key)
            self.truncating.discard(key)
            self.resting.pop(key, None)
        self._wakeup.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, keys) -> None:
        for key in keys:
            self.partitions.pop(key, None)
            self.truncating.discard(key)
            self.unchecked.discard(key)
            self.rejoin.discard(key)
            self.resting.pop(key, None)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.conn is not None:
            await self.conn.close()

    async def _run(self) -> None:
        cfg = self.manager.config
        while self.partitions:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = await BrokerConnection.open(
                        *self.address, client_id=f"broker-{cfg.node_id}-fetcher-{self.leader_id}",
                        timeout_s=cfg.replica_socket_timeout_ms / 1000,
                        request_timeout_s=cfg.replica_socket_timeout_ms / 1000 + cfg.replica_fetch_wait_max_ms / 1000,
                        node_id=self.leader_id, security=inter_broker_security(cfg))
                if self.unchecked:
                    if self._version() < FIRST_DIVERGING_VERSION:  # the leader cannot tell: ask it first
                        self.truncating |= self.unchecked
                    self.unchecked.clear()
                if self.truncating:
                    await self._truncate()
                await self._fetch_once()  # the partitions not truncating
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("fetching from broker %d at %s:%d failed: %s; retrying", self.leader_id, *self.address, exc)
                if self.conn is not None:
                    await self.conn.close()
                    self.conn = None
                self.session.reset()
                self._wakeup.clear()
                try:  # a new LeaderAndIsr may wake us sooner
                    await asyncio.wait_for(self._wakeup.wait(), cfg.replica_fetch_backoff_ms / 1000)
                except asyncio.TimeoutError:
                    pass

    async def _truncate(self) -> None:
        req_cls = REQUESTS[EPOCH_KEY]
        topics = {}
        for key in list(self.truncating):
            if key in self.resting:
                continue  # asked again once it has rested
            p = self.partitions[key]
            epoch = p.log.epochs.latest_epoch
            if epoch < 0:  # nothing to compare: an empty log (or one without epochs) keeps its end
                self.truncating.discard(key)
                continue
            topics.setdefault(key[0], []).append(req_cls.OffsetForLeaderPartition(
                partition=key[1], current_leader_epoch=p.leader_epoch, leader_epoch=epoch))
        if not topics:
            return
        req = req_cls(replica_id=self.manager.node_id, topics=[
            req_cls.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])
        resp = await self.conn.request(req, EPOCH_VERSION)
        for t in resp.topics:
            for r in t.partitions:
                key = (t.topic, r.partition)
                p = self.partitions.get(key)
                if p is None or key not in self.truncating:
                    continue
                if r.error_code == FENCED_LEADER_EPOCH:
                    self.remove([key])  # the controller will tell us who leads now
                    continue
                if r.error_code in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION):
                    self._rest(key)
                    continue
                if r.error_code:
                    continue  # UNKNOWN_LEADER_EPOCH: the leader has not heard yet; ask again
                offset, settled = truncation_offset(p, r.leader_epoch, r.end_offset)
                p.truncate_to(offset)
                if settled:
                    self.truncating.discard(key)

    def _rest(self, key) -> None:
        self.resting[key] = asyncio.get_running_loop().time() + self.manager.config.replica_fetch_backoff_ms / 1000

    async def _fetch_once(self) -> None:
        req_cls = REQUESTS[FETCH]
        now = asyncio.get_running_loop().time()
        for key in [k for k, until in self.resting.items() if until <= now]:
            del self.resting[key]
        if len(self.resting) == len(self.partitions):  # every partition rests: wait, or for news
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), max(min(self.resting.values()) - now, 0.001))
            except asyncio.TimeoutError:
                pass
            return
        wanted, throttled = self.wanted()
        session = self.session
        if not wanted and (session.full or not session.sent):  # throttled or truncating: wait a little
            await asyncio.sleep(THROTTLE_WAIT_S)
            return
        version = self._version()
        req = self._request(req_cls, version, wanted)
        self.rejoin.clear()  # held out of this request: forgotten by the session, whole again in the next
        resp = await self.conn.request(req, version)
        self.session.answered(resp.error_code, resp.session_id)
        names = ({p.topic_id: key[0] for key, p in self.partitions.items()} if version >= FIRST_TOPIC_ID_VERSION
                 else None)
        for t in resp.responses:
            topic = t.topic if names is None else names.get(t.topic_id)
            for r in t.partitions:
                key = (topic, r.partition_index)
                p = self.partitions.get(key)
                if p is None:
                    continue
                if key in self.truncating or key in self.unchecked:  # added again meanwhile: this answer is stale
                    self.rejoin.add(key)
                    continue
                if r.error_code == 0 and r.diverging_epoch.epoch >= 0:
                    self._truncate_on_divergence(key, p, r)
                elif r.error_code == 0:
                    if r.records is not None and len(r.records):
                        batches = whole_batches(r.records)
                        if len(batches):
                            p.append_as_follower(batches)
                            if key in throttled:
                                self.manager.follower_quota.record(len(batches))
                    if p.update_follower_high_watermark(r.high_watermark):
                        self.manager.on_follower_high_watermark(key)
                elif r.error_code == OFFSET_OUT_OF_RANGE:
                    if p.log_end_offset < r.log_start_offset:
                        p.truncate_fully_and_start_at(r.log_start_offset)
                    else:
                        self.truncating.add(key)  # ahead of the leader: find the divergence again
                elif r.error_code == FENCED_LEADER_EPOCH:
                    self.remove([key])
                elif r.error_code in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION):
                    self._rest(key)
                elif r.error_code != UNKNOWN_LEADER_EPOCH:
                    log.warning("fetching %s-%d from broker %d: error %d", *key, self.leader_id, r.error_code)
        if not resp.responses and resp.error_code and resp.error_code not in SESSION_ERRORS:
            raise RuntimeError(f"fetch error {resp.error_code}")

    def wanted(self) -> tuple[dict, set]:
        """(key -> fetch parameters of each partition to fetch now, the throttled ones among them):
        not those resting, truncating, over the throttle rate, or held out of the session once."""
        wanted, throttled = {}, set()
        over_rate = self.manager.follower_quota.exceeded()
        session = self.session
        held = self.rejoin & session.sent.keys() if self.rejoin and not session.full else ()
        for key, p in self.partitions.items():
            if key in self.resting or key in self.truncating or key in held:
                continue
            if self.manager.throttled(p):
                if over_rate:
                    continue  # Kafka's follower throttle: left out of this fetch
                throttled.add(key)
            wanted[key] = (p.leader_epoch, p.log_end_offset, p.log_start_offset, p.log.epochs.latest_epoch)
        return wanted, throttled

    def _truncate_on_divergence(self, key, p, r) -> None:
        """The leader ended our last fetched epoch before our log end: cut there and fetch on (the
        next fetch names our new last epoch; the leader answers again if that diverges too)."""
        epoch, end = r.diverging_epoch.epoch, r.diverging_epoch.end_offset
        offset, settled = truncation_offset(p, epoch, end)
        log.info("%s-%d: the leader ended epoch %d at %d, our log at %d: truncating to %d", *key, epoch, end,
                 p.log_end_offset, offset)
        p.truncate_to(offset)
        if offset >= p.log_end_offset:  # as Kafka: an epoch we began as leader without data conflicts
            p.log.epochs.truncate_from_end(p.log_end_offset)
        if settled:  # our log is the leader's up to its end now: its high watermark holds for us
            p.update_follower_high_watermark(r.high_watermark)

    def _version(self) -> int:
        """The leader's highest Fetch version; below topic ids (v13) while any partition has none."""
        version = self.conn.version(FETCH, FETCH_MIN_VERSION, FETCH_MAX_VERSION)
        if version >= FIRST_TOPIC_ID_VERSION and not all(
                getattr(p.topic_id, "int", 0) for p in self.partitions.values()):
            version = FIRST_TOPIC_ID_VERSION - 1
        return version

    def _request(self, req_cls, version: int, wanted: dict):
        """The next Fetch: in a session, only the partitions whose parameters changed."""
        cfg = self.manager.config
        send, forget = self.session.build(wanted) if version >= 7 else (list(wanted), [])
        by_id = version >= FIRST_TOPIC_ID_VERSION
        topics = {}
        for key in send:
            p = self.partitions[key]
            topics.setdefault(key[0], []).append(req_cls.FetchPartition(
                partition=key[1], current_leader_epoch=p.leader_epoch, fetch_offset=p.log_end_offset,
                last_fetched_epoch=p.log.epochs.latest_epoch,  # v12+: the leader checks it for divergence
                log_start_offset=p.log_start_offset, partition_max_bytes=cfg.replica_fetch_max_bytes))
        forgotten = {}
        for topic, index in forget:
            forgotten.setdefault(topic, []).append(index)
        ids = self.topic_ids if by_id else {}
        session = self.session
        return req_cls(replica_id=self.manager.node_id,
                       replica_state=req_cls.ReplicaState(replica_id=self.manager.node_id, replica_epoch=-1),
                       max_wait_ms=cfg.replica_fetch_wait_max_ms, min_bytes=cfg.replica_fetch_min_bytes,
                       max_bytes=max(cfg.replica_fetch_max_bytes, 10 << 20), isolation_level=0,
                       session_id=session.session_id if version >= 7 else 0,
                       session_epoch=session.epoch if version >= 7 else -1,
                       topics=[req_cls.FetchTopic(topic=t, topic_id=ids.get(t) or ZERO_UUID, partitions=ps)
                               for t, ps in topics.items()],
                       forgotten_topics_data=[req_cls.ForgottenTopic(topic=t, topic_id=ids.get(t) or ZERO_UUID,
                                                                     partitions=ps) for t, ps in forgotten.items()],
                       rack_id="")


def _ignore(key) -> None:
    pass


class ReplicaFetcherManager:
    """Assigns follower partitions to fetchers: one per leader and slot (num.replica.fetchers)."""

    def __init__(self, node_id: int, config):
        self.node_id = node_id
        self.config = config
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.num_fetchers = config.num_replica_fetchers  # changeable live (DynamicBrokerConfigs)
        self.follower_quota = ReplicationQuota(samples=config.replication_quota_window_num,
                                               sample_s=config.replication_quota_window_size_seconds)
        self.on_follower_high_watermark = _ignore  # (topic, partition): set by the replica manager

    def throttled(self, p) -> bool:
        """follower.replication.throttled.rate applies: a throttled partition we follow out of sync."""
        return (self.follower_quota.limited and self.node_id not in p.isr
                and is_throttled(p.log.config.follower_replication_throttled_replicas, p.index, self.node_id))

    def _slot(self, key) -> int:
        return hash(key) % self.num_fetchers

    def resize(self, count: int) -> None:
        """num.replica.fetchers changed live: the followed partitions are spread over new fetchers
        (each truncates by leader epoch again, which changes nothing when already in step)."""
        if count == self.num_fetchers:
            return
        log.info("num.replica.fetchers: %d -> %d", self.num_fetchers, count)
        self.num_fetchers = count
        following = [(p, f.leader_id, f.address) for f in self.fetchers.values() for p in f.partitions.values()]
        loop = asyncio.get_running_loop()
        for fetcher in self.fetchers.values():
            loop.create_task(fetcher.stop())
        self.fetchers = {}
        self.add([p for p, _, _ in following], {leader: address for _, leader, address in following})

    def add(self, partitions, leaders: dict) -> None:
        self.remove([(p.topic, p.index) for p in partitions])
        groups = {}
        for p in partitions:
            address = leaders.get(p.leader_id)
            if address is None:
                log.warning("no address for broker %d, leader of %s-%d", p.leader_id, p.topic, p.index)
                continue
            fid = (p.leader_id, self._slot((p.topic, p.index)))
            fetcher = self.fetchers.get(fid)
            if fetcher is None or fetcher.address != address:
                if fetcher is not None:
                    asyncio.get_running_loop().create_task(fetcher.stop())
                fetcher = self.fetchers[fid] = ReplicaFetcher(self, p.leader_id, address)
            groups.setdefault(fid, []).append(p)
        for fid, ps in groups.items():
            self.fetchers[fid].add(ps)

    def remove(self, keys) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(keys)

    async def shutdown(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
