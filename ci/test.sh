#!/usr/bin/env bash
# Install pybroker with its test dependencies on this machine, then run the whole test suite:
# every tier on the native core, each with the parallel workers that suit it, then the unit tier with
# the broker smoke and client tests once more on the pure-Python twins.
# With arguments, only those are run, as pytest arguments: ``bash ci/test.sh tests/unit -n 2``.
set -euo pipefail
cd "$(dirname "$0")/.."

# kcat is one of the real Kafka clients the broker tests drive
if ! command -v kcat >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq kcat >/dev/null
    else sudo apt-get update -qq && sudo apt-get install -y -qq kcat >/dev/null; fi
fi
# the Spark data source tests run PySpark in local mode, which needs a Java runtime (17+)
if ! command -v java >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    else sudo apt-get update -qq && sudo apt-get install -y -qq openjdk-17-jre-headless >/dev/null; fi
fi
# the cluster tests run a real standalone ZooKeeper from Debian's package (jars in /usr/share/java)
if [ ! -f /usr/share/java/zookeeper.jar ]; then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq zookeeper >/dev/null
    else sudo apt-get update -qq && sudo apt-get install -y -qq zookeeper >/dev/null; fi
fi
PYTHON=${PYTHON:-python3}  # the interpreter to test with (ci/test-pythons.sh runs the others)
"$PYTHON" -m pip install --quiet --upgrade pip
"$PYTHON" -m pip install --quiet -e ".[test]"

bash ci/lint.sh  # ruff, the import contracts, no import circles, fresh generated codecs

if [ "$#" -gt 0 ]; then
    exec "$PYTHON" -m pytest -q "$@"
fi

failed=()
tier() {  # tier NAME PYTEST-ARGS...: run one tier, note it if it fails, go on with the next
    local name=$1 start=$SECONDS
    shift
    echo "=== $name: pytest $*"
    "$PYTHON" -m pytest -q "$@" || failed+=("$name")
    echo "=== $name: $((SECONDS - start)) s"
}
# unit: in-process and CPU-bound, one worker per core
tier unit -n 2 tests/unit
# broker: each test waits on broker processes most of the time, so more workers than cores;
# --dist loadgroup keeps the tests of a module-scoped broker (or Kafka) on one worker
tier broker -n 4 --dist loadgroup tests/broker
# cluster and interop in one run: ZooKeeper (a JVM per worker) and three or four brokers per cluster
# test; the Spark tests share one session on one worker, the other workers meanwhile take cluster tests
tier cluster+interop -n 4 --dist loadgroup tests/cluster tests/interop
# the pure-Python twins: the unit tier, the broker smoke and the client tests once more
PYBROKER_IMPL=pure tier pure -n 2 --dist loadgroup tests/unit tests/broker/test_broker_smoke.py \
    tests/broker/test_client_producer.py tests/broker/test_client_consumer.py

if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed tiers: ${failed[*]}"
    exit 1
fi
