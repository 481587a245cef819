"""asv benchmarks for pybroker (run them with ``python bench/dashboard.py``).

Import paths: in an asv virtualenv the commit under test is installed, and it must win over
the working tree; a ``--quick`` run in the current environment uses the in-place build.
The helper scripts in bench/ and tests/ come from the working tree either way.
"""
import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)

try:
    import pybroker  # noqa: F401  the installed commit (asv virtualenv)
except ImportError:
    sys.path.insert(0, ROOT)  # not installed: the working tree's in-place build
    import pybroker  # noqa: F401

if BENCH not in sys.path:
    sys.path.insert(0, BENCH)  # bench_storage, bench_codec, bench_broker, ...
if ROOT not in sys.path:
    sys.path.append(ROOT)  # tests.broker, tests.kafka_wire; appended so it never shadows pybroker

# True when pybroker comes from site-packages: a broker subprocess must then not see the work tree.
INSTALLED = not os.path.abspath(pybroker.__file__).startswith(ROOT + os.sep)
QUICK = os.environ.get("PYBROKER_BENCH_QUICK") == "1"  # set by `dashboard.py --quick`
