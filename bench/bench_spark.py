"""The "pybroker" Spark data source: batch read and Parquet write throughput, next to ceilings.

    python bench/bench_spark.py [--records 5000000] [--value-bytes 100] [--partitions 4] [--runs 3]

A fresh `pybroker serve` (its own process, stopped by PID at the end) gets one topic of
``--partitions`` partitions filled once by a separate producer process (pybroker's
``Producer.produce_batch``). Spark runs ``local[2]``; session start-up is not timed. Each figure
is the median of ``--runs``:

- source count:   spark.read.format("pybroker")...load().count()
- source→parquet: the same DataFrame written to Parquet
- client read:    the source's own range reader in this process, no Spark (what one Python
                  process can pull from the broker; it also writes the Arrow files below)
- ceilings, the same records without the broker:
  arrow count / arrow→parquet: a minimal Python data source yielding the same Arrow batches
                  from memory-mapped Arrow IPC files (the cost of any Python data source:
                  batches still travel from the Python worker to the JVM)
  parquet count / parquet→parquet: Spark's built-in Parquet reader (count uses only footers)

Prints rows/s and the ratios source/ceiling.
"""
import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPARK_SOURCE = os.path.join(ROOT, "spark_source")
for path in (ROOT, SPARK_SOURCE):
    if path not in sys.path:
        sys.path.insert(0, path)


class Broker:
    """A ``pybroker serve`` subprocess on 127.0.0.1 with a free port, stopped by its PID."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.proc = None
        self.bootstrap = None

    def start(self, timeout_s: float = 60.0) -> "Broker":
        import selectors
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "serve", "--override", f"log.dirs={self.data_dir}",
             "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        with selectors.DefaultSelector() as sel:  # bounded wait for the one ready line
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if "listening on" not in line:
            self.stop()
            raise SystemExit(f"the broker did not start: {line.strip() or 'no ready line'}")
        self.bootstrap = line.strip().rsplit("://", 1)[1]
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        import signal
        import subprocess

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

TOPIC = "bench-spark"
CHUNK = 250_000  # records per produce_batch call


def produce_topic(bootstrap: str, records: int, value_bytes: int, partitions: int) -> None:
    """Fill TOPIC (run in a child process): records spread evenly over the partitions."""
    import numpy as np
    import pyarrow as pa

    from pybroker.client import AdminClient, NewTopic, Producer

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 512 * 1024,
                         "compression.type": "none"})
    rng = np.random.default_rng(7)
    value_data = rng.integers(32, 127, size=CHUNK * value_bytes, dtype=np.uint8).tobytes()
    offsets = np.arange(0, (CHUNK + 1) * value_bytes, value_bytes, dtype=np.int32)
    values = pa.Array.from_buffers(pa.binary(), CHUNK, [None, pa.py_buffer(offsets), pa.py_buffer(value_data)])
    futures = []
    per_partition = records // partitions
    for p in range(partitions):
        left = per_partition + (1 if p < records % partitions else 0)
        while left > 0:
            n = min(CHUNK, left)
            futures.append(producer.produce_batch(TOPIC, values.slice(0, n), partition=p))
            left -= n
    assert producer.flush(600) == 0, "records left unacknowledged"
    for fut in futures:
        fut.result(600)
    producer.close()


def client_read(bootstrap: str, partitions: int, arrow_dir: str) -> tuple:
    """Read every partition with the source's range reader; write each to an Arrow IPC file.
    (seconds spent reading, rows)"""
    import pyarrow as pa

    from pyspark_pybroker.fetch import read_range
    from pyspark_pybroker.metadata import OffsetLookup
    from pyspark_pybroker.options import parse_read_options

    opts = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}, streaming=False)
    with OffsetLookup(opts) as lookup:
        tps = lookup.topic_partitions()
        _, ends, _ = lookup.bounds(tps)
    read_s, rows = 0.0, 0
    for topic, p in tps:
        t0 = time.perf_counter()
        batches = list(read_range(opts, topic, p, 0, ends[(topic, p)]))
        read_s += time.perf_counter() - t0
        rows += sum(b.num_rows for b in batches)
        with pa.OSFile(os.path.join(arrow_dir, f"part-{p}.arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, batches[0].schema) as writer:
                for b in batches:
                    writer.write_batch(b)
    return read_s, rows


def arrow_file_source():
    """A minimal Python data source serving Arrow IPC files, one Spark partition per file."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pyspark_pybroker.schema import spark_schema

    class ArrowFileReader(DataSourceReader):
        def __init__(self, directory):
            self.directory = directory

        def partitions(self):
            return [InputPartition(os.path.join(self.directory, name))
                    for name in sorted(os.listdir(self.directory))]

        def read(self, partition):
            import pyarrow as pa

            source = pa.memory_map(partition.value)
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    class ArrowFileSource(DataSource):
        @classmethod
        def name(cls):
            return "arrowfile"

        def schema(self):
            return spark_schema(False)

        def reader(self, schema):
            return ArrowFileReader(self.options["path"])

    return ArrowFileSource


def timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="bench-spark-")
    broker = Broker(os.path.join(work, "data"))
    try:
        broker.start()
        bootstrap = broker.bootstrap
        t0 = time.perf_counter()
        child = multiprocessing.get_context("spawn").Process(
            target=produce_topic, args=(bootstrap, args.records, args.value_bytes, args.partitions))
        child.start()
        child.join(1800)
        if child.is_alive():
            child.kill()
            raise SystemExit("producing the data took too long")
        if child.exitcode != 0:
            raise SystemExit(f"the producer process failed ({child.exitcode})")
        produce_s = time.perf_counter() - t0
        print(f"produced {args.records:,} records of {args.value_bytes} B into {args.partitions} "
              f"partitions in {produce_s:.1f} s", flush=True)

        arrow_dir = os.path.join(work, "arrow")
        os.makedirs(arrow_dir)
        read_s, read_rows = client_read(bootstrap, args.partitions, arrow_dir)
        assert read_rows == args.records, (read_rows, args.records)

        os.environ["PYTHONPATH"] = os.pathsep.join(
            [SPARK_SOURCE, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("bench-spark")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "4g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(arrow_file_source())

        def source():
            return (spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", TOPIC).load())

        def arrow():
            return spark.read.format("arrowfile").option("path", arrow_dir).load()

        parquet_in = os.path.join(work, "parquet-in")
        arrow().write.mode("overwrite").parquet(parquet_in)
        out = os.path.join(work, "out")

        def count(df_fn):
            def run():
                n = df_fn().count()
                assert n == args.records, (n, args.records)
            return run

        def to_parquet(df_fn):
            def run():
                df_fn().write.mode("overwrite").parquet(out)
            return run

        count(source)()  # warm-up: Python workers, JIT
        results = {
            "source count": timed(count(source), args.runs),
            "source→parquet": timed(to_parquet(source), args.runs),
            "arrow count": timed(count(arrow), args.runs),
            "arrow→parquet": timed(to_parquet(arrow), args.runs),
            "parquet count": timed(count(lambda: spark.read.parquet(parquet_in)), args.runs),
            "parquet→parquet": timed(to_parquet(lambda: spark.read.parquet(parquet_in)), args.runs),
        }
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)

    n = args.records
    print(f"\n{n:,} records x {args.value_bytes} B, {args.partitions} partitions, local[2], "
          f"median of {args.runs}")
    print(f"{'':18}{'seconds':>10}{'rows/s':>14}")
    print(f"{'client read':18}{read_s:10.2f}{n / read_s:14,.0f}   (no Spark, one process)")
    for name, secs in results.items():
        print(f"{name:18}{secs:10.2f}{n / secs:14,.0f}")
    print("\nratios (source / ceiling, rows/s):")
    for ours, ceiling in (("source count", "arrow count"), ("source→parquet", "arrow→parquet"),
                          ("source count", "parquet count"), ("source→parquet", "parquet→parquet")):
        print(f"  {ours} / {ceiling}: {results[ceiling] / results[ours]:.2f}")
    print(f"\ntargets: count >= 3,000,000 rows/s: {n / results['source count']:,.0f}; "
          f"write >= 1,000,000 rows/s: {n / results['source→parquet']:,.0f}")


if __name__ == "__main__":
    main()
