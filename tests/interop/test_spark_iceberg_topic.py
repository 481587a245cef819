"""A topic written as an Iceberg table by the broker, read by PySpark through the "pybroker" data source's
table mode: the same rows as reading the topic itself through the data source."""
import pytest

from tests.icebergutil import catalog, wait_equal
from tests.spark_fixtures import *  # noqa: F401,F403 - the shared Spark session and broker

pytest.importorskip("pyiceberg")


def test_table_mode_reads_what_topic_mode_reads(spark, spark_broker):
    topic = unique_topic("iceberg-orders")  # noqa: F405
    create_topic(spark_broker.bootstrap, topic, partitions=3,  # noqa: F405
                 config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": "1000"})
    records = [(f"k{i % 7}".encode(), f"order-{i}".encode() * (1 + i % 4), [("src", b"web")] if i % 2 else None,
                None) for i in range(300)]
    produce(spark_broker.bootstrap, topic, records)  # noqa: F405
    data = spark_broker.data_dir
    got, want = wait_equal(catalog(data), spark_broker.bootstrap, topic, 3)
    assert got == want and len(want) == 300

    table = (spark.read.format("pybroker").option("table", f"kafka.{topic}")
             .option("catalog.uri", f"sqlite:///{data}/iceberg/catalog.db")
             .option("warehouse", f"file://{data}/iceberg/warehouse").load())
    from_topic = (spark.read.format("pybroker").option("kafka.bootstrap.servers", spark_broker.bootstrap)
                  .option("subscribe", topic).load())
    table_rows = sorted(tuple(r) for r in table.selectExpr("kafka.partition", "kafka.offset", "key", "value")
                        .collect())
    topic_rows = sorted(tuple(r) for r in from_topic.selectExpr("partition", "offset", "key", "value").collect())
    assert table_rows == topic_rows and len(table_rows) == 300
    assert table.count() == from_topic.count() == 300
    by_table = sorted(tuple(r) for r in table.where("length(value) > 20").groupBy("kafka.partition").count()
                      .collect())
    by_topic = sorted(tuple(r) for r in from_topic.where("length(value) > 20").groupBy("partition").count()
                      .collect())
    assert by_table == by_topic and by_table
