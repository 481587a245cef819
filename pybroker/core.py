"""The storage core, native or pure, chosen once per process.

PYBROKER_IMPL=native (default) loads the compiled modules from pybroker._native;
PYBROKER_IMPL=pure loads the pure-Python twins from pybroker._pure. Each module is
imported on first use, so ``core.batch`` is whichever implementation is selected.
Both implementations satisfy the protocols in pybroker.contracts.
"""
import importlib
import os

IMPL = os.environ.get("PYBROKER_IMPL", "native")
if IMPL not in ("native", "pure"):
    raise ImportError(f"PYBROKER_IMPL must be 'native' or 'pure', not {IMPL!r}")

MODULES = ("crc", "batch", "index", "fileio", "writer", "transfer", "kafka_codec", "client_codec", "producer_fast",
           "offset_map")


def load(name: str, impl: str = IMPL):
    """Import one core module from the given implementation."""
    if name not in MODULES:
        raise AttributeError(f"pybroker.core has no module {name!r}")
    package = "pybroker._native" if impl == "native" else "pybroker._pure"
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError as exc:
        if impl == "native":
            raise ImportError(
                f"native module pybroker._native.{name} is not built ({exc}); "
                "run `pip install .` (or set PYBROKER_IMPL=pure)") from exc
        raise


def __getattr__(name: str):
    module = load(name)
    globals()[name] = module  # later lookups skip __getattr__
    return module
