"""A broker that has not yet been told the live brokers (restarting into a cluster) holds Metadata
answers until it has, so clients are never told there is no broker and drop their connections."""
import asyncio
from types import SimpleNamespace

from pybroker.api import metadata
from pybroker.api.context import RequestContext
from pybroker.config import BrokerConfig
from pybroker.controller.metadata_cache import BrokerEndpoint, MetadataCache
from pybroker.protocol.messages import REQUESTS
from pybroker.replica.fetch_sessions import FetchSessionCache
from pybroker.services import Services


def test_metadata_waits_until_the_broker_knows_the_live_brokers():
    cache = MetadataCache()
    services = Services(BrokerConfig(node_id=2), 2, cache, FetchSessionCache(1))
    header = SimpleNamespace(request_api_version=12)
    conn = SimpleNamespace(server=SimpleNamespace(listener_name="PLAINTEXT"))
    request = REQUESTS[metadata.API_KEY](topics=[], allow_auto_topic_creation=False)

    async def run():
        answer = asyncio.ensure_future(metadata.handle(RequestContext(services, header, conn), request))
        await asyncio.sleep(0.05)
        assert not answer.done()  # held: an empty broker list would make clients drop every broker
        cache.update(1, [BrokerEndpoint(1, {"PLAINTEXT": ("127.0.0.1", 9092)}),
                         BrokerEndpoint(2, {"PLAINTEXT": ("127.0.0.1", 9093)})], [], {})
        response = await asyncio.wait_for(answer, 5)
        assert [b.node_id for b in response.brokers] == [1, 2] and response.controller_id == 1

    asyncio.run(run())
