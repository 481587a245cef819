"""Share groups on their group coordinator (the leader of the group's ``__consumer_offsets``
partition): membership through ShareGroupHeartbeat, the server-side assignment, session expiry.

Membership lives in memory: when the coordinator moves, members hear UNKNOWN_MEMBER_ID or
NOT_COORDINATOR and join the new coordinator again, as after a KIP-848 coordinator change without
its records. What members consumed is not here but in each share-partition's durable state.
"""
from __future__ import annotations

import asyncio
import logging

from pybroker.coordinator.group import DEAD, now_ms
from pybroker.protocol.errors import GROUP_ID_NOT_FOUND
from pybroker.share.group import HeartbeatResult, ShareGroup

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
EXPIRY_CHECK_S = 0.25


class ShareGroups:
    def __init__(self, services, settings_for):
        self.services = services  # coordinator (ownership and the other group types), metadata
        self.settings_for = settings_for
        self.groups: dict[str, ShareGroup] = {}
        self._timer: asyncio.Task | None = None

    def startup(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._expire_forever())

    def shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.groups.clear()

    def on_leadership(self, key, is_leader: bool) -> None:
        """An offsets partition moved: its share groups are coordinated elsewhere (or anew) from now."""
        if key[0] != OFFSETS_TOPIC:
            return
        store = self.services.offsets
        for group_id in [g for g in self.groups if store.partition_for(g) == key[1]]:
            del self.groups[group_id]

    def check(self, group_id: str) -> tuple[int, str | None]:
        """0, or the error (and message) a share-group request for ``group_id`` gets here."""
        coordinator = self.services.coordinator
        error = coordinator.check_available(group_id)
        if error:
            return error, None
        classic = coordinator.groups.get(group_id)
        if group_id in coordinator.consumer.groups or (classic is not None and not classic.is_(DEAD)):
            return GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
        return 0, None

    def topics(self) -> dict:
        """name -> (topic id, partition count) of every topic with an id (internal ones excluded)."""
        out = {}
        for name, meta in self.services.metadata.topics.items():
            if name.startswith("__") or not getattr(meta.topic_id, "int", 0):
                continue
            out[name] = (meta.topic_id, len(meta.partitions))
        return out

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id, subscribed, client_id: str,
                  client_host: str) -> HeartbeatResult:
        error, message = self.check(group_id)
        if error:
            return HeartbeatResult(error, message, member_id, member_epoch, 0, None)
        settings = self.settings_for(group_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_epoch != 0:
                return self._unknown(group_id, member_id, member_epoch, settings, rack_id, subscribed, client_id,
                                     client_host)
            group = self.groups[group_id] = ShareGroup(group_id)
        self._configure(group, settings)
        return group.heartbeat(member_id, member_epoch, rack_id, subscribed, now_ms(), self.topics(),
                               client_id=client_id, client_host=client_host)

    def _unknown(self, group_id, member_id, member_epoch, settings, *rest) -> HeartbeatResult:
        group = ShareGroup(group_id)  # answers as a group that does not know the member
        self._configure(group, settings)
        return group.heartbeat(member_id, member_epoch, *rest[:2], now_ms(), self.topics(),
                               client_id=rest[2], client_host=rest[3])

    @staticmethod
    def _configure(group: ShareGroup, settings) -> None:
        group.session_timeout_ms = settings.session_timeout_ms
        group.heartbeat_interval_ms = settings.heartbeat_interval_ms
        group.max_size = settings.max_size

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def delete(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = now_ms()
            for group in list(self.groups.values()):
                for member_id in group.expire(now):
                    log.info("share group %s: member %s left (session timed out)", group.group_id, member_id)
