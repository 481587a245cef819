"""Connections from this broker to the others over the inter-broker listener, one per broker, kept
open between uses (transaction markers and KIP-890 verification requests)."""
import logging

from pybroker.client.connection import BrokerConnection
from pybroker.security.inter_broker import inter_broker_security

log = logging.getLogger(__name__)

EXTRA_WAIT_S = 30.0  # requests that wait for replication may take this long beyond the socket timeout


class PeerConnections:
    def __init__(self, config, metadata, client_id: str):
        self.config = config
        self.metadata = metadata  # the MetadataCache: where each broker listens
        self.client_id = client_id
        self.connections: dict[int, BrokerConnection] = {}

    async def request(self, broker_id: int, request, api_key: int, lo: int, hi: int):
        """Send ``request`` at the highest version in lo..hi the peer supports; the response.

        Raises when the peer is unknown or the link fails (the link is then dropped)."""
        conn = await self._connection(broker_id)
        try:
            return await conn.request(request, conn.version(api_key, lo, hi))
        except Exception:
            self.connections.pop(broker_id, None)
            await conn.close()
            raise

    async def _connection(self, broker_id: int) -> BrokerConnection:
        conn = self.connections.get(broker_id)
        if conn is not None and not conn.closed:
            return conn
        cfg = self.config
        endpoint = self.metadata.brokers.get(broker_id)
        address = endpoint.address(cfg.inter_broker_listener.name) if endpoint is not None else None
        if address is None:
            raise ConnectionError(f"broker {broker_id} has no {cfg.inter_broker_listener.name} endpoint known here")
        timeout_s = cfg.controller_socket_timeout_ms / 1000
        conn = await BrokerConnection.open(*address, client_id=f"broker-{cfg.node_id}-{self.client_id}",
                                           timeout_s=timeout_s, request_timeout_s=timeout_s + EXTRA_WAIT_S,
                                           node_id=broker_id, security=inter_broker_security(cfg))
        self.connections[broker_id] = conn
        return conn

    async def close(self) -> None:
        for conn in list(self.connections.values()):
            await conn.close()
        self.connections.clear()
