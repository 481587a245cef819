"""Network layer: listeners and connections (size framing, ordered responses, zero-copy sends)."""
from pybroker.net.connection import Connection
from pybroker.net.server import NetStats, Server, new_event_loop, run, serve

__all__ = ["Connection", "NetStats", "Server", "new_event_loop", "run", "serve"]
