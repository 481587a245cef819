"""A broker's side of Kafka's controlled shutdown: before it stops, it asks the controller
(ControlledShutdown) to move every leadership off it and take it out of the ISRs, so producers
see only NOT_LEADER_OR_FOLLOWER and move on, and no acks=all write waits on a broker that is gone.
Retried up to controlled.shutdown.max.retries times, controlled.shutdown.retry.backoff.ms apart;
after that the broker stops anyway (the controller then treats it as failed)."""
import asyncio
import logging

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.errors import UNKNOWN_SERVER_ERROR
from pybroker.protocol.messages import REQUESTS
from pybroker.security.inter_broker import inter_broker_security

log = logging.getLogger(__name__)

API_KEY, VERSION = 7, 3


async def ask_controller(config, metadata, broker_epoch: int, local) -> tuple[int, list]:
    """One ControlledShutdown round trip: (error code, partitions still led here). ``local``: this
    broker's controller (a ZkController), asked in-process when it is the active one."""
    node_id = config.node_id
    controller = metadata.controller_id
    if controller == node_id and local is not None and local.active:
        return await local.controlled_shutdown(node_id, broker_epoch)
    endpoint = metadata.brokers.get(controller)
    address = endpoint.address(config.inter_broker_listener.name) if endpoint is not None else None
    if address is None:
        return -1, []  # no controller known yet: ask again after the backoff
    timeout = config.controller_socket_timeout_ms / 1000
    conn = await BrokerConnection.open(*address, client_id=f"broker-{node_id}-shutdown",
                                       timeout_s=timeout, request_timeout_s=timeout, node_id=controller,
                                       security=inter_broker_security(config))
    try:
        resp = await conn.request(REQUESTS[API_KEY](broker_id=node_id, broker_epoch=broker_epoch), VERSION)
    finally:
        await conn.close()
    return resp.error_code, [(p.topic_name, p.partition_index) for p in resp.remaining_partitions]


async def controlled_shutdown(cfg, ask) -> bool:
    """True once no partition is led here any more; False when the retries ran out. ``ask()``: one
    round trip to the controller, (error code, partitions still led here)."""
    attempts = cfg.controlled_shutdown_max_retries + 1
    for attempt in range(1, attempts + 1):
        try:
            error, remaining = await ask()
        except Exception as exc:  # the controller may be moving or gone: retry like any failure
            error, remaining = UNKNOWN_SERVER_ERROR, []
            log.info("controlled shutdown: asking the controller failed: %s", exc)
        if error == 0 and not remaining:
            log.info("controlled shutdown: no partition is led here any more")
            return True
        log.info("controlled shutdown attempt %d of %d: error %d, %d partition(s) still led here",
                 attempt, attempts, error, len(remaining))
        if attempt < attempts:
            await asyncio.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000)
    log.warning("controlled shutdown did not finish after %d attempts; stopping anyway", attempts)
    return False
