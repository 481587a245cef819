"""Spark typed reads of schema-registry framed Avro against the same records read as raw bytes.

    python bench/bench_registry_spark.py [--records 1000000] [--partitions 2] [--runs 3] [--json FILE]

One broker process (``python -m pybroker serve``) serves the schema registry on a free port
(``schema.registry.listeners``). An Avro record schema (a string, a double, a long, an optional string, a
boolean: about 30 bytes a record) is registered under ``<topic>-value``; a child process fills a topic of
``--partitions`` partitions with ``--records`` framed records (magic byte, schema id, fastavro payload)
through pybroker's ``Producer.produce_batch``. Spark runs ``local[2]``; session start-up is not timed.
Each figure is the median of ``--runs`` runs of:

- count:   ``spark.read.format("pybroker")...load().count()``, raw and with ``value.format=avro``
           (a Python data source has no column pruning: count reads and, when typed, decodes every record)
- collect: one column to the driver: raw ``value`` (bytes) vs typed ``value.seq`` (a long)

Prints seconds, rows/s and the typed/raw ratio of each (target: ≤ 2×). Only the broker started here is
stopped (by its PID).
"""
import argparse
import io
import json
import multiprocessing
import os
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPARK_SOURCE = os.path.join(ROOT, "spark_source")
for path in (ROOT, SPARK_SOURCE):
    if path not in sys.path:
        sys.path.insert(0, path)

TOPIC = "bench-registry-spark"
CHUNK = 100_000  # records per produce_batch call
SCHEMA = {"type": "record", "name": "Reading", "namespace": "bench",
          "fields": [{"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"},
                     {"name": "seq", "type": "long"}, {"name": "site", "type": ["null", "string"], "default": None},
                     {"name": "ok", "type": "boolean"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A ``pybroker serve`` subprocess serving the registry on ``url``, stopped by its PID."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc = None
        self.bootstrap = None

    def start(self, timeout_s: float = 60.0) -> "Broker":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "serve", "--override", f"log.dirs={self.data_dir}",
             "--override", "listeners=PLAINTEXT://127.0.0.1:0",
             "--override", f"schema.registry.listeners={self.url}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        with selectors.DefaultSelector() as sel:  # bounded wait for the one ready line
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if "listening on" not in line:
            self.stop()
            raise SystemExit(f"the broker did not start: {line.strip() or 'no ready line'}")
        self.bootstrap = line.strip().rsplit("://", 1)[1]
        deadline = time.monotonic() + timeout_s
        while True:  # the registry starts in the background after the Kafka listeners
            try:
                with urllib.request.urlopen(self.url + "/subjects", timeout=5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"the registry at {self.url} did not answer within {timeout_s}s") from None
                time.sleep(0.1)

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout_s)
        finally:
            self.proc.stdout.close()


def produce_topic(bootstrap: str, url: str, records: int, partitions: int) -> None:
    """Register SCHEMA and fill TOPIC with framed records (run in a child process)."""
    import fastavro
    import pyarrow as pa

    from pybroker.client import AdminClient, NewTopic, Producer
    from pybroker.client.schema_registry import RegistryClient
    from pybroker.schemas.wire import frame

    schema_id = RegistryClient(url).register(f"{TOPIC}-value", "AVRO", json.dumps(SCHEMA))
    parsed = fastavro.parse_schema(SCHEMA)
    values = []
    for i in range(CHUNK):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"sensor": f"sensor-{i % 500}", "celsius": i / 7.0, "seq": i,
                                                 "site": "lab" if i % 3 else None, "ok": i % 2 == 0})
        values.append(frame(schema_id, out.getvalue()))
    chunk = pa.array(values, pa.binary())
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 512 * 1024,
                         "compression.type": "none"})
    futures = []
    per_partition = records // partitions
    for p in range(partitions):
        left = per_partition + (1 if p < records % partitions else 0)
        while left > 0:
            n = min(CHUNK, left)
            futures.append(producer.produce_batch(TOPIC, chunk.slice(0, n), partition=p))
            left -= n
    assert producer.flush(600) == 0, "records left unacknowledged"
    for fut in futures:
        fut.result(600)
    producer.close()


def timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="bench-registry-spark-")
    broker = Broker(os.path.join(work, "data"))
    spark = None
    try:
        broker.start()
        t0 = time.perf_counter()
        child = multiprocessing.get_context("spawn").Process(
            target=produce_topic, args=(broker.bootstrap, broker.url, args.records, args.partitions))
        child.start()
        child.join(1800)
        if child.exitcode != 0:
            raise SystemExit(f"filling the topic failed (exit code {child.exitcode})")
        print(f"filled {TOPIC}: {args.records:,} framed Avro records in {args.partitions} partitions "
              f"({time.perf_counter() - t0:.1f} s)")

        os.environ["PYTHONPATH"] = os.pathsep.join([SPARK_SOURCE, ROOT, os.environ.get("PYTHONPATH", "")])
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("bench-registry-spark")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        base = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": TOPIC}
        typed_opts = {**base, "value.format": "avro", "schema.registry.url": broker.url}

        def load(options):
            return spark.read.format("pybroker").options(**options).load()

        assert load(base).count() == args.records  # warm-up: Python workers started, data in page cache
        assert load(typed_opts).count() == args.records
        first = load(typed_opts).where("offset = 0 AND partition = 0").select("value").collect()[0]["value"]
        assert first["seq"] == 0 and first["sensor"] == "sensor-0", first

        results = {
            "raw count": timed(lambda: load(base).count(), args.runs),
            "typed count": timed(lambda: load(typed_opts).count(), args.runs),
            "raw collect value": timed(lambda: load(base).select("value").collect(), args.runs),
            "typed collect value.seq": timed(lambda: load(typed_opts).select("value.seq").collect(), args.runs),
        }
        print(f"\n{'read':<26}{'seconds':>10}{'rows/s':>14}")
        for name, seconds in results.items():
            print(f"{name:<26}{seconds:>10.2f}{args.records / seconds:>14,.0f}")
        ratios = {"count": results["typed count"] / results["raw count"],
                  "collect": results["typed collect value.seq"] / results["raw collect value"]}
        print()
        for name, ratio in ratios.items():
            print(f"typed/raw {name:<8} {ratio:5.2f}x  (target <= 2x: {'ok' if ratio <= 2 else 'MISSED'})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"records": args.records, "partitions": args.partitions, "runs": args.runs,
                           "seconds": results, "ratios": ratios}, f, indent=2)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
