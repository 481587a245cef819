"""Share groups on one broker: its part of every role, built over the broker's typed services.

- group coordinator of the share groups whose ``__consumer_offsets`` partition it leads (groups.py),
- share coordinator of the share-partition states in the ``__share_group_state`` partitions it leads
  (coordinator.py),
- leader of share-partitions: acquisition and acknowledgement of records of the partitions it leads
  (manager.py), through share sessions (sessions.py), with their state written through persister.py.
"""
from __future__ import annotations

from pybroker.share.coordinator import ShareCoordinator
from pybroker.share.groups import ShareGroups
from pybroker.share.manager import SharePartitionManager
from pybroker.share.persister import StatePersister
from pybroker.share.sessions import ShareSessions
from pybroker.share.settings import ShareGroupSettings, ShareSettings
from pybroker.share.state_rpc import RemoteStates


class ShareService:
    def __init__(self, config, services, peers):
        self.config = config
        self.services = services
        self.settings = None  # ShareSettings, once the control is there (startup)
        self.coordinator = ShareCoordinator(config, services)
        self.remote = RemoteStates(peers)
        self.persister = StatePersister(services, self.coordinator, self.remote)
        self.partitions = SharePartitionManager(services, self.persister, self.settings_for)
        self.sessions = ShareSessions(config.group_share_max_share_sessions)
        self.groups = ShareGroups(services, self.settings_for)

    def settings_for(self, group_id: str) -> ShareGroupSettings:
        if self.settings is None or self.settings.groups is None:
            self.settings = ShareSettings(self.services.control, self.config)
        return self.settings.for_group(group_id)

    def startup(self) -> None:
        self.partitions.startup()
        self.groups.startup()

    async def shutdown(self) -> None:
        self.groups.shutdown()
        await self.partitions.shutdown()
        await self.coordinator.shutdown()
        await self.remote.close()

    def on_leadership(self, key, is_leader: bool) -> None:
        self.coordinator.on_leadership(key, is_leader)
        self.groups.on_leadership(key, is_leader)
        self.partitions.on_leadership(key, is_leader)

    # ---- sessions tied to connections ---------------------------------------------------------------

    def connection_closed(self, conn) -> None:
        """A connection's share sessions end with it: what their members hold goes back to the others."""
        for session in self.sessions.of_connection(conn.id):
            self.sessions.close(session.group_id, session.member_id)
            self.release(session)

    def release(self, session) -> None:
        """A share session ended: what its member held goes back to the others."""
        changed = self.partitions.release_member(session.group_id, session.member_id, session.partitions)
        for h in changed:
            self.partitions.persist_later(h)
        group_id = session.group_id
        if not self.sessions.of_group(group_id):
            self.partitions.retire_group(group_id, lambda: not self.sessions.of_group(group_id))
