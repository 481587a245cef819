"""A response body already encoded, as the network layer sends it."""


class Parts(list):
    """An encoded response body as buffers and file slices, sent in order without copying."""
