"""Batch reads: resolve the offset bounds once on the driver, split them into Spark partitions."""
from pyspark.sql.datasource import DataSourceReader, InputPartition

from pyspark_pybroker.metadata import OffsetLookup, bound_spec, report_data_loss
from pyspark_pybroker.offsets import OffsetRange, plan_ranges
from pyspark_pybroker.options import OptionError, ReadOptions


class RangePartition(InputPartition):
    """One Spark task: offsets [start, end) of topic-partition (topic, partition)."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __eq__(self, other):
        return isinstance(other, RangePartition) and vars(self) == vars(other)

    def __hash__(self):
        return hash((self.topic, self.partition, self.start, self.end))


def resolve_batch_ranges(opts: ReadOptions) -> list:
    """The OffsetRanges of a batch query: starting and ending bounds made concrete, checked
    against where each log starts and ends now."""
    start_bound = bound_spec(opts.starting, "starting")
    end_bound = bound_spec(opts.ending, "ending")
    with OffsetLookup(opts) as lookup:
        tps = lookup.topic_partitions()
        if not tps:
            return []
        log_starts, log_ends, (starts, ends) = lookup.bounds(tps, start_bound, end_bound)
    ranges = []
    for tp in tps:
        topic, partition = tp
        start, end = starts[tp], ends[tp]
        if end > log_ends[tp]:
            raise OptionError(f"option '{end_bound[2]}': offset {end} of {topic}-{partition} is "
                              f"past the end of its log ({log_ends[tp]})")
        if start > end:
            raise OptionError(f"the starting offset {start} of {topic}-{partition} is after its "
                              f"ending offset {end} (options '{start_bound[2]}' and "
                              f"'{end_bound[2]}')")
        if start < log_starts[tp]:
            report_data_loss(opts, f"offsets {start} to {min(log_starts[tp], end) - 1} of "
                                   f"{topic}-{partition} are no longer in the log (it now starts "
                                   f"at {log_starts[tp]})")
            start = min(log_starts[tp], end)
        ranges.append(OffsetRange(topic, partition, start, end))
    return ranges


class BatchReader(DataSourceReader):
    """Reads fixed offset ranges; picklable (holds only options and plain values)."""

    def __init__(self, opts: ReadOptions, decoding=None):
        self.opts = opts
        self.decoding = decoding  # a registry_decode.DecodePlan when keys/values are decoded

    def partitions(self):
        ranges = plan_ranges(resolve_batch_ranges(self.opts), self.opts.min_partitions,
                             self.opts.max_records_per_partition)
        return [RangePartition(*r) for r in ranges]

    def read(self, partition):
        if not isinstance(partition, RangePartition):
            return iter(())  # nothing planned: Spark still runs one task with a placeholder
        return read_partition(self.opts, self.decoding, partition)


def read_partition(opts: ReadOptions, decoding, partition: RangePartition):
    """The Arrow batches of one planned range, decoded when the read has a decode plan."""
    from pyspark_pybroker.fetch import read_range

    batches = read_range(opts, partition.topic, partition.partition, partition.start, partition.end)
    if decoding is None:
        return batches
    from pyspark_pybroker.registry_decode import decode_batches

    return decode_batches(decoding, opts.include_headers, batches, partition.topic, partition.partition)
