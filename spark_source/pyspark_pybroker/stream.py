"""Streaming reads: micro-batches between offsets ``{"topic": {"partition": offset}}``.

The driver-side reader lives as long as the query; it looks up the log ends for each trigger and
applies the admission limits (maxOffsetsPerTrigger, minOffsetsPerTrigger with maxTriggerDelay).
A batch's ranges follow from its start and end offsets, so a replayed batch reads the same
rows. Partitions that appear while the query runs are read from where their logs start, looked
up on the driver (a log that no longer starts at 0 is reported as data loss, per failOnDataLoss).
"""
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow,
)

from pyspark_pybroker.batch import RangePartition, read_partition
from pyspark_pybroker.metadata import OffsetLookup, bound_spec, report_data_loss
from pyspark_pybroker.offsets import (
    OffsetRange, backlog, from_json_dict, plan_ranges, rate_limit, to_json_dict,
)
from pyspark_pybroker.options import ReadOptions


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions, decoding=None):
        self.opts = opts
        self.decoding = decoding  # a registry_decode.DecodePlan when keys/values are decoded
        self._lookup = None  # opened on first use, on the driver only (not pickled)
        self._target = None  # end offsets fixed by Trigger.AvailableNow
        self._latest = None  # last looked-up log ends, for progress reports
        self._last_trigger_ms = 0.0

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_lookup"] = None
        return state

    def _offsets(self) -> OffsetLookup:
        if self._lookup is None:
            self._lookup = OffsetLookup(self.opts)
        return self._lookup

    def _log_ends(self) -> dict:
        lookup = self._offsets()
        return lookup.latest(lookup.topic_partitions())

    # --- driver: offsets -------------------------------------------------------------------
    def initialOffset(self) -> dict:
        lookup = self._offsets()
        tps = lookup.topic_partitions()
        bound = bound_spec(self.opts.starting, "starting")
        log_starts, _, (starts,) = lookup.bounds(tps, bound)
        for tp, off in starts.items():
            if off < log_starts[tp]:
                report_data_loss(self.opts, f"option '{bound[2]}' asks for offset {off} of "
                                            f"{tp[0]}-{tp[1]}, but its log now starts at "
                                            f"{log_starts[tp]}")
                starts[tp] = log_starts[tp]
        return to_json_dict(starts)

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._log_ends()

    def _with_new_partitions(self, start: dict, tps) -> dict:
        """``start`` plus, for each of ``tps`` it lacks (a new partition), its log start."""
        new = [tp for tp in tps if tp not in start]
        if not new:
            return dict(start)
        return {**self._offsets().earliest(new), **start}

    def latestOffset(self, start: dict, limit=None) -> dict:
        start_offsets = from_json_dict(start)
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = self._log_ends()
        self._latest = latest
        if limit is None or isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            end = self._admit(start_offsets, latest)
        return to_json_dict(end)

    def _admit(self, start: dict, latest: dict) -> dict:
        """Apply minOffsetsPerTrigger/maxTriggerDelay (wait for enough records) and then
        maxOffsetsPerTrigger (cap the batch), as Spark's Kafka source does."""
        waiting_at = start
        start = self._with_new_partitions(start, latest)  # backlogs count from the log starts
        now_ms = time.time() * 1000.0
        minimum = self.opts.min_offsets_per_trigger
        if minimum is not None and self._target is None:  # AvailableNow never waits for more
            if now_ms - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
                self._last_trigger_ms = now_ms
            elif backlog(start, latest) < minimum:
                return waiting_at  # no new batch yet
            else:
                self._last_trigger_ms = now_ms
        if self.opts.max_offsets_per_trigger is not None:
            return rate_limit(self.opts.max_offsets_per_trigger, start, latest)
        return latest

    def reportLatestOffset(self):
        return to_json_dict(self._latest) if self._latest else None

    # --- driver: planning -----------------------------------------------------------------
    def partitions(self, start: dict, end: dict):
        start_offsets = from_json_dict(start)
        end_offsets = from_json_dict(end)
        if start_offsets == end_offsets:
            return []
        gone = sorted(set(start_offsets) - set(end_offsets))
        if gone:
            report_data_loss(self.opts, "topic-partitions " + ", ".join(f"{t}-{p}" for t, p in gone)
                             + " are gone; records not yet read from them are lost")
        new = [tp for tp in end_offsets if tp not in start_offsets]
        log_starts = self._offsets().earliest(new) if new else {}
        ranges = []
        for tp, until in end_offsets.items():
            if tp in start_offsets:
                since = start_offsets[tp]
            else:  # a new partition: from where its log starts now
                since = min(log_starts.get(tp, 0), until)
                if since > 0:
                    report_data_loss(self.opts, f"the new partition {tp[0]}-{tp[1]} starts at "
                                                f"offset {since} instead of 0: offsets 0 to "
                                                f"{since - 1} were removed before they were read")
            if until < since:
                report_data_loss(self.opts, f"the offset of {tp[0]}-{tp[1]} went back from "
                                            f"{since} to {until} (topic recreated?)")
                continue
            ranges.append(OffsetRange(tp[0], tp[1], since, until))
        planned = plan_ranges(ranges, self.opts.min_partitions,
                              self.opts.max_records_per_partition)
        return [RangePartition(*r) for r in planned]

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the broker

    def stop(self) -> None:
        lookup, self._lookup = self._lookup, None
        if lookup is not None:
            lookup.close()

    # --- executors ------------------------------------------------------------------------
    def read(self, partition):
        if not isinstance(partition, RangePartition):
            return iter(())
        return read_partition(self.opts, self.decoding, partition)

