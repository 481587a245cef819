"""Controller to broker requests (LeaderAndIsr, UpdateMetadata, StopReplica), in order per broker.

One queue and one sender task per live broker: requests to a broker are sent one at a time in the
order the controller made them, and retried until they get an answer or the broker leaves (as
Kafka's ControllerChannelManager). A broker that leaves and comes back gets a fresh queue.
"""
import asyncio
import logging

from pybroker.client.connection import BrokerConnection

log = logging.getLogger(__name__)

RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class BrokerQueue:
    def __init__(self, channel, broker_id: int, address: tuple):
        self.channel = channel
        self.broker_id = broker_id
        self.address = address
        self.queue: asyncio.Queue = asyncio.Queue()
        self.conn = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            request, version, on_response = await self.queue.get()
            attempt = 0
            while True:
                try:
                    if self.conn is None or self.conn.closed:
                        self.conn = await BrokerConnection.open(
                            *self.address, client_id=f"controller-{self.channel.controller_id}",
                            timeout_s=self.channel.timeout_s, request_timeout_s=self.channel.timeout_s,
                            node_id=self.broker_id, security=self.channel.security)
                    response = await self.conn.request(request, version)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if attempt == 0:
                        log.info("controller request to broker %d failed: %s; retrying", self.broker_id, exc)
                    if self.conn is not None:
                        await self.conn.close()
                        self.conn = None
                    await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
                    attempt += 1
            if on_response is not None:
                try:
                    on_response(self.broker_id, response)
                except Exception:
                    log.exception("handling a response of broker %d failed", self.broker_id)

    async def close(self) -> None:
        self.task.cancel()
        if self.conn is not None:
            await self.conn.close()


class ControllerChannel:
    def __init__(self, controller_id: int, timeout_s: float, security=None):
        self.controller_id = controller_id
        self.timeout_s = timeout_s
        self.security = security  # of the inter-broker listener (pybroker/security/inter_broker.py)
        self.brokers: dict[int, BrokerQueue] = {}

    def set_brokers(self, addresses: dict) -> None:
        """Keep one queue per broker in ``addresses`` (id -> (host, port)); drop the rest."""
        for bid in list(self.brokers):
            q = self.brokers[bid]
            if bid not in addresses or q.address != addresses[bid]:
                asyncio.get_running_loop().create_task(self.brokers.pop(bid).close())
        for bid, address in addresses.items():
            if bid not in self.brokers:
                self.brokers[bid] = BrokerQueue(self, bid, address)

    def send(self, broker_id: int, request, version: int, on_response=None) -> None:
        q = self.brokers.get(broker_id)
        if q is not None:
            q.queue.put_nowait((request, version, on_response))

    async def close(self) -> None:
        for q in list(self.brokers.values()):
            await q.close()
        self.brokers.clear()
