"""Pick how file slices reach sockets: sendfile(2) (pybroker.core.transfer) or io_uring splice.

``get_sender(method)`` takes the method from its argument, else the environment variable
PYBROKER_TRANSFER (``sendfile`` | ``io_uring``), else DEFAULT. Every sender has ``name``,
``send_slice``, ``send_slice_all`` (the contract in pybroker.contracts.transfer) and ``close``.
An io_uring sender owns a ring and a pipe: one per thread, and close it when done.
"""
import os

from pybroker import core

METHODS = ("sendfile", "io_uring")
# measured (bench_transfer, 1 GiB): sendfile 1.28 GB/s @0.20 CPU-s/GB, io_uring 1.16 GB/s @0.39
DEFAULT = "sendfile"


class SendfileSender:
    """sendfile(2) through pybroker.core.transfer (PYBROKER_IMPL=pure gives os.sendfile)."""

    name = "sendfile"

    def __init__(self, impl: str | None = None):
        module = core.transfer if impl is None else core.load("transfer", impl)
        self.send_slice = module.send_slice
        self.send_slice_all = module.send_slice_all

    def close(self) -> None:
        pass  # holds nothing

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def get_sender(method: str | None = None):
    """A sender for ``method`` (argument, else $PYBROKER_TRANSFER, else DEFAULT)."""
    chosen = method or os.environ.get("PYBROKER_TRANSFER") or DEFAULT
    if chosen == "sendfile":
        return SendfileSender()
    if chosen == "io_uring":
        from pybroker.uring import UringSender
        return UringSender()
    raise ValueError(f"unknown transfer method {chosen!r}; expected one of {METHODS}")
