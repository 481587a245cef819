"""ApiVersions: the version ranges of the registration table (KIP-511 fallback for newer clients)."""
from pybroker.protocol.messages import RESPONSES

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4
UNSUPPORTED_VERSION = 35

Response = RESPONSES[API_KEY]


def supported_ranges():
    from pybroker.api import TABLE  # the table imports this module
    return [Response.ApiVersion(api_key=key, min_version=api.MIN_VERSION, max_version=api.MAX_VERSION)
            for key, api in sorted(TABLE.items())]


def handle(ctx, request):
    return Response(error_code=0, api_keys=supported_ranges(), throttle_time_ms=0,
                    finalized_features_epoch=-1)


def unsupported_version_response():
    """Sent as a v0 response to an ApiVersions version we do not know, so the client can retry lower."""
    return Response(error_code=UNSUPPORTED_VERSION, api_keys=supported_ranges())
