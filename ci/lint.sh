#!/usr/bin/env bash
# The source checks itself: style and undefined names (ruff), the layer contracts (import-linter,
# pyproject.toml [tool.importlinter]), no import circles, and generated codecs that match the specs.
set -euo pipefail
cd "$(dirname "$0")/.."

"${PYTHON:-python3}" -m ruff check pybroker spark_source bench tests
lint-imports --no-cache
"${PYTHON:-python3}" ci/import_cycles.py pybroker pyspark_pybroker
# the committed codecs and error table must be what the generator makes of the specs (exit 2: no specs here)
rc=0
"${PYTHON:-python3}" -m pybroker.protocol.generate --check || rc=$?
if [ "$rc" = 2 ]; then echo "Kafka message specs not found: generated codecs not checked"; elif [ "$rc" != 0 ]; then exit "$rc"; fi
