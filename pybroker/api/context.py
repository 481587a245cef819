"""What an API handler gets: the broker's parts and the request's header."""
from dataclasses import dataclass


@dataclass
class RequestContext:
    broker: object       # pybroker.broker.Broker: config, replicas, controller
    header: object       # the decoded RequestHeader
    connection: object   # the pybroker.net connection (peer, id)

    @property
    def version(self) -> int:
        return self.header.request_api_version

    @property
    def session(self):
        """The connection's pybroker.security.session.Session (listener, principal, client host)."""
        return self.connection.session


class Parts(list):
    """An encoded response body as buffers and file slices, sent in order without copying."""
