"""Client-side TLS contexts, for pybroker's clients and for the broker's own links to other brokers."""
import ssl


def client_context(cafile: str | None = None, cadata: str | None = None, certfile: str | None = None,
                   keyfile: str | None = None, password: str | None = None, check_hostname: bool = True,
                   minimum_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2) -> ssl.SSLContext:
    """A client-side context: trusts ``cafile``/``cadata`` (else the system's CAs), presents
    ``certfile`` (+``keyfile``) when given, checks the broker's host name unless told not to."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = minimum_version
    ctx.check_hostname = check_hostname
    if cafile or cadata:
        ctx.load_verify_locations(cafile=cafile, cadata=cadata)
    else:
        ctx.load_default_certs()
    if certfile:
        ctx.load_cert_chain(certfile, keyfile, password)
    return ctx
