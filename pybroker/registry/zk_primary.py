"""Which broker's registry is the primary (the one that writes), elected through ZooKeeper.

Each registry creates an ephemeral sequential node under ``/pybroker/schema_registry/primary`` (in the
cluster's chroot) holding the URL other brokers reach it at; the lowest sequence number wins. A
children watch keeps ``is_primary`` and ``primary_url`` current on every registry. A registry whose
ZooKeeper connection is suspended or whose session is lost stops being primary at once (writes then
fail or are forwarded), and takes part again with a new node once it has a new session.
"""
import asyncio
import logging
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

log = logging.getLogger(__name__)

ELECTION_PATH = "/pybroker/schema_registry/primary"
NODE_PREFIX = "member-"
DEFAULT_SESSION_S = 18.0  # Kafka's zookeeper.session.timeout.ms default
CONNECT_TIMEOUT_S = 30.0
RETRY_S = 0.5


class ZkPrimary:
    """``ZkPrimary(zk_connect, my_url)``: ``zk_connect`` as in ``zookeeper.connect`` (chroot included);
    ``my_url`` is this registry's base URL (settable until ``start``)."""

    def __init__(self, zk_connect: str, my_url: str | None = None, *, path: str = ELECTION_PATH,
                 session_timeout_s: float = DEFAULT_SESSION_S):
        self.zk_connect = zk_connect
        self.my_url = my_url
        self.path = path.rstrip("/")
        self._session_timeout_s = session_timeout_s
        self._zk: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._my_node: str | None = None  # our node's name under path, in the current session
        self._is_primary = False
        self._primary_url: str | None = None
        self._lock = threading.Lock()  # one election step at a time (kazoo threads and the loop)
        self._needs_node = threading.Event()  # a new session: our node must be created again
        self._closed = False
        self._changed = None  # asyncio.Event, set whenever the outcome may have changed
        self._worker = None

    @property
    def is_primary(self) -> bool:
        return self._is_primary

    @property
    def primary_url(self) -> str | None:
        return self._primary_url

    async def start(self) -> None:
        if not self.my_url:
            raise ValueError("ZkPrimary needs this registry's URL before it starts")
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._zk = KazooClient(hosts=self.zk_connect, timeout=self._session_timeout_s)
        self._zk.add_listener(self._on_state)
        try:
            await self._loop.run_in_executor(None, self._zk.start, CONNECT_TIMEOUT_S)
        except KazooTimeoutError:
            self._zk.stop()
            raise ConnectionError(f"cannot reach ZooKeeper at {self.zk_connect}") from None
        await self._loop.run_in_executor(None, self._join)
        self._zk.ChildrenWatch(self.path, self._on_children)
        self._worker = self._loop.create_task(self._keep_joined(), name="registry election")

    async def wait_decided(self, timeout_s: float) -> bool:
        """Wait (bounded) until some registry is known as the primary; whether one is."""
        deadline = self._loop.time() + timeout_s
        while self._primary_url is None and self._loop.time() < deadline:
            self._changed.clear()
            try:  # in slices: the election keeper clears the same event
                await asyncio.wait_for(self._changed.wait(), min(0.5, max(0.0, deadline - self._loop.time())))
            except asyncio.TimeoutError:
                pass
        return self._primary_url is not None

    async def close(self) -> None:
        self._closed = True
        self._is_primary = False
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        if self._zk is not None:
            zk, self._zk = self._zk, None
            await asyncio.get_running_loop().run_in_executor(None, _stop_client, zk)

    # ---- ZooKeeper side (kazoo's threads and the executor) ----------------------------------------

    def _join(self) -> None:
        """Create our node (a new one per session) and decide."""
        zk = self._zk
        zk.ensure_path(self.path)
        created = zk.create(f"{self.path}/{NODE_PREFIX}", self.my_url.encode(), ephemeral=True, sequence=True)
        with self._lock:
            self._my_node = created.rsplit("/", 1)[1]
        log.info("schema registry election: joined as %s (%s)", self._my_node, self.my_url)
        self._decide(zk.get_children(self.path))

    def _on_state(self, state) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._is_primary = False  # until ZooKeeper confirms us again
            if self._closed:
                return
            if state == KazooState.LOST:
                with self._lock:
                    self._my_node = None  # the ephemeral node went with the session
                self._needs_node.set()
            log.warning("schema registry election: ZooKeeper connection %s; not primary", state.lower())
        self._notify()

    def _on_children(self, children) -> None:
        if self._closed or self._zk is None:
            return False  # stops the watch
        try:
            self._decide(children)
        except (KazooException, KazooTimeoutError) as exc:  # a later event or the keeper retries
            log.info("schema registry election: %s", exc)
        return None

    def _decide(self, children) -> None:
        members = sorted(c for c in children if c.startswith(NODE_PREFIX))
        url = winner = None
        for name in members:  # the lowest member whose data can still be read
            try:
                data, _ = self._zk.get(f"{self.path}/{name}")
            except NoNodeError:
                continue
            url, winner = data.decode() or None, name
            break
        with self._lock:
            connected = self._zk is not None and self._zk.state == KazooState.CONNECTED
            primary = bool(url) and connected and winner == self._my_node
            changed = (primary, url) != (self._is_primary, self._primary_url)
            self._is_primary, self._primary_url = primary, url
        if changed:
            log.info("schema registry primary: %s%s", url, " (this broker)" if primary else "")
        self._notify()

    def _notify(self) -> None:
        loop, event = self._loop, self._changed
        if loop is not None and event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass  # the loop is closing

    # ---- the keeper: rejoins after a lost session, re-decides after a reconnect -----------------------

    async def _keep_joined(self) -> None:
        while not self._closed:
            self._changed.clear()
            zk = self._zk
            if zk is not None and zk.state == KazooState.CONNECTED:
                try:
                    if self._needs_node.is_set():
                        self._needs_node.clear()
                        await self._loop.run_in_executor(None, self._join)
                    elif not self._is_primary and self._my_node is not None:
                        await self._loop.run_in_executor(None, lambda: self._decide(zk.get_children(self.path)))
                except (KazooException, KazooTimeoutError) as exc:
                    log.info("schema registry election: %s; retrying", exc)
                    if self._my_node is None:
                        self._needs_node.set()
                    await asyncio.sleep(RETRY_S)
                    continue
            try:
                await asyncio.wait_for(self._changed.wait(), 5.0)
            except asyncio.TimeoutError:
                pass


def _stop_client(zk: KazooClient) -> None:
    try:
        zk.stop()  # the session ends: our ephemeral node goes at once, the others re-elect
        zk.close()
    except Exception as exc:  # shutting down anyway
        log.debug("closing the registry's ZooKeeper client: %s", exc)
