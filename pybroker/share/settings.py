"""A share group's effective settings: its group configs (pybroker/coordinator/group_configs.py) over
the broker's ``group.share.*`` keys."""
from __future__ import annotations

from dataclasses import dataclass

from pybroker.coordinator.group_configs import GroupConfigs


@dataclass(frozen=True)
class ShareGroupSettings:
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 200
    lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_in_flight: int = 2000
    auto_offset_reset: str = "latest"  # latest | earliest | by_duration:<ISO-8601>
    reset_duration_ms: int | None = None  # by_duration's duration
    isolation_level: str = "read_uncommitted"

    def partition_settings(self) -> dict:
        return {"delivery_count_limit": self.delivery_count_limit, "lock_duration_ms": self.lock_duration_ms,
                "max_in_flight": self.max_in_flight}


class ShareSettings:
    """``for_group(group_id)``: the settings a share group has now."""

    def __init__(self, control, config):
        self.config = config
        self.groups = GroupConfigs(control, config) if control is not None else None

    def for_group(self, group_id: str) -> ShareGroupSettings:
        cfg = self.config
        g = self.groups.effective(group_id) if self.groups is not None else None
        if g is None:
            return ShareGroupSettings(cfg.group_share_session_timeout_ms, cfg.group_share_heartbeat_interval_ms,
                                      cfg.group_share_max_size, cfg.group_share_record_lock_duration_ms,
                                      cfg.group_share_delivery_count_limit, cfg.group_share_partition_max_record_locks)
        return ShareGroupSettings(
            session_timeout_ms=g.share_session_timeout_ms, heartbeat_interval_ms=g.share_heartbeat_interval_ms,
            max_size=cfg.group_share_max_size, lock_duration_ms=g.share_record_lock_duration_ms,
            delivery_count_limit=cfg.group_share_delivery_count_limit,
            max_in_flight=cfg.group_share_partition_max_record_locks,
            auto_offset_reset=g.share_auto_offset_reset.lower().split(":", 1)[0] if g.share_reset_duration_ms is None
            else "by_duration", reset_duration_ms=g.share_reset_duration_ms,
            isolation_level=g.share_isolation_level)
