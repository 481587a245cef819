"""ApiVersions: the version ranges of the registration table (KIP-511 fallback for newer clients);
v3+ adds the supported and finalized features (pybroker/api/features.py). v3 leaves out features
whose lowest version is 0, as older clients cannot read them; v4 lists them all."""
import re

from pybroker.api import features
from pybroker.protocol.errors import INVALID_REQUEST, UNSUPPORTED_VERSION
from pybroker.protocol.messages import RESPONSES

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")  # Kafka's client software name/version rule

Response = RESPONSES[API_KEY]
TABLE: dict = {}  # API key -> handler module: the registration table, filled in by pybroker/api/__init__.py


def supported_ranges():
    return [Response.ApiVersion(api_key=key, min_version=api.MIN_VERSION, max_version=api.MAX_VERSION)
            for key, api in sorted(TABLE.items())]


def handle(ctx, request):
    if ctx.version < 3:
        return Response(error_code=0, api_keys=supported_ranges(), throttle_time_ms=0)
    if not (_SOFTWARE.fullmatch(request.client_software_name or "")
            and _SOFTWARE.fullmatch(request.client_software_version or "")):
        return Response(error_code=INVALID_REQUEST, api_keys=[], throttle_time_ms=0)
    supported = [Response.SupportedFeatureKey(name=name, min_version=low, max_version=high)
                 for name, (low, high) in sorted(features.supported(TABLE).items()) if ctx.version >= 4 or low > 0]
    finalized = [Response.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
                 for name, level in sorted(features.finalized(TABLE).items())]
    return Response(error_code=0, api_keys=supported_ranges(), throttle_time_ms=0, supported_features=supported,
                    finalized_features_epoch=features.FINALIZED_EPOCH, finalized_features=finalized)


def unsupported_version_response():
    """Sent as a v0 response to an ApiVersions version we do not know, so the client can retry lower."""
    return Response(error_code=UNSUPPORTED_VERSION, api_keys=supported_ranges())
