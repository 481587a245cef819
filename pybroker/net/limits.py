"""Connection counts shared by all of a broker's listeners: ``max.connections`` (broker-wide),
``listener.name.<listener>.max.connections`` (one listener), ``max.connections.per.ip`` and
``max.connections.per.ip.overrides``, Kafka's keys.

A socket over a limit is closed as soon as it is accepted; connections already open are not
touched. The inter-broker listener is exempt from the broker-wide limit (so replication never
starves behind clients) but not from the per-address ones, as in Kafka.
"""
import logging
import socket
from collections import Counter

log = logging.getLogger(__name__)


class ConnectionLimits:
    def __init__(self, max_connections: int, per_ip: int, per_ip_overrides=None, per_listener=None):
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = _resolve(per_ip_overrides or {})
        self.per_listener = dict(per_listener or {})  # listener name -> its max.connections
        self.total = 0
        self.by_ip: Counter = Counter()
        self.by_listener: Counter = Counter()

    @classmethod
    def from_config(cls, config) -> "ConnectionLimits | None":
        """None when nothing is limited: no counting at all on accept."""
        unlimited = 2**31 - 1
        if (config.max_connections >= unlimited and config.max_connections_per_ip >= unlimited
                and not config.max_connections_per_ip_overrides and not config.listener_max_connections):
            return None
        return cls(config.max_connections, config.max_connections_per_ip, config.max_connections_per_ip_overrides,
                   config.listener_max_connections)

    def refusal(self, ip: str, exempt: bool = False, listener: str | None = None) -> str | None:
        """Why a new connection from ``ip`` to ``listener`` is refused (then not counted), or None
        (then counted)."""
        limit = self.overrides.get(ip, self.per_ip)
        if self.by_ip[ip] >= limit:
            return f"{ip} already has {self.by_ip[ip]} connection(s) (max.connections.per.ip: {limit})"
        own = self.per_listener.get(listener)
        if own is not None and self.by_listener[listener] >= own:
            return (f"listener {listener} has {self.by_listener[listener]} connection(s) "
                    f"(listener.name.{listener.lower()}.max.connections: {own})")
        if not exempt and self.total >= self.max_connections:
            return f"the broker has {self.total} connection(s) (max.connections: {self.max_connections})"
        self.total += 1
        self.by_ip[ip] += 1
        self.by_listener[listener] += 1
        return None

    def release(self, ip: str, listener: str | None = None) -> None:
        self.total -= 1
        self.by_listener[listener] -= 1
        left = self.by_ip[ip] - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            del self.by_ip[ip]


def _resolve(overrides) -> dict[str, int]:
    """Override keys may be host names: count them under each of their addresses."""
    out = {}
    for host, count in overrides.items():
        out[host] = count
        try:
            for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM):
                out.setdefault(info[4][0], count)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s: %s", host, exc)
    return out
