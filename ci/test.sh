#!/usr/bin/env bash
# Install pybroker with its test dependencies on this machine, then run the whole test suite:
# once on the native core, once more for the storage tests on the pure-Python twins.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --upgrade pip
python3 -m pip install --quiet -e ".[test]"

python3 -m pytest -q "$@"
PYBROKER_IMPL=pure python3 -m pytest -q tests/test_log.py tests/test_log_state_machine.py \
    tests/test_recovery.py tests/test_manager.py
