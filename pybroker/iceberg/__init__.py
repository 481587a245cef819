"""Topics as Apache Iceberg tables.

A topic whose ``iceberg.mode`` is not ``disabled`` is translated into an Iceberg table by a worker
process of the broker that leads its partitions (``worker.py``): it reads committed records through
the Kafka protocol like any client, writes Parquet files and commits them to the catalog with the next
offset of every partition in the snapshot's summary, so a restarted or new leader resumes exactly
there. The broker only starts and feeds the worker (``supervisor.py``); nothing here runs on the
request path.
"""
