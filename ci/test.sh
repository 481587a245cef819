#!/usr/bin/env bash
# Install pybroker with its test dependencies on this machine, then run the whole test suite:
# once on the native core, once more for the storage, broker smoke and client tests on the pure-Python twins.
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
# the native offset map (log cleaner) inlines XXH3 from xxhash.h; without it the pure twin is used
if [ ! -f /usr/include/xxhash.h ]; then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq libxxhash-dev >/dev/null
    else sudo apt-get update -qq && sudo apt-get install -y -qq libxxhash-dev >/dev/null; fi
fi
python3 -m pip install --quiet --upgrade pip
python3 -m pip install --quiet -e ".[test]"

python3 -m pytest -q "$@"
PYBROKER_IMPL=pure python3 -m pytest -q tests/test_log.py tests/test_log_state_machine.py \
    tests/test_recovery.py tests/test_manager.py tests/test_broker_smoke.py \
    tests/test_client_producer.py tests/test_client_consumer.py
