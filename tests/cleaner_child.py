"""Child process for the cleaner crash test: appends and cleans a compacted log until it is killed.

Every record is deterministic from its offset (key ``key-<offset*7 % 40>``, value
``r<round>-o<offset>``), so the parent can check any record it finds. ``A <first> <last>`` is
printed after each append returns and ``C`` before each cleaning; the cleaner is throttled so that a
kill soon after a ``C`` lands mid-cleaning.
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pybroker.log import LogConfig  # noqa: E402
from pybroker.log.cleaner import Cleaner, CleanerSettings, Throttler  # noqa: E402
from pybroker.log.manager import LogManager  # noqa: E402
from pybroker.records import Record, build_batch  # noqa: E402

CONFIG = LogConfig(cleanup_policy="compact", segment_bytes=3000, index_interval_bytes=512, retention_ms=-1,
                   min_cleanable_dirty_ratio=0.0, delete_retention_ms=10**12)
KEYS = 40


def record_for(offset: int, round_: int) -> Record:
    return Record(value=b"r%d-o%d" % (round_, offset), key=b"key-%d" % (offset * 7 % KEYS), timestamp=offset)


def main() -> None:
    directory, round_, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    m = LogManager([directory], CONFIG, background=False, cleaner=CleanerSettings()).startup()
    lg = m.get_or_create_log("t", 0, CONFIG)
    cleaner = Cleaner(1 << 20, 0.9, Throttler(rate, threading.Event()))
    print("ready", flush=True)
    now = 1
    while True:
        for _ in range(5):
            first = lg.log_end_offset
            info = lg.append(build_batch([record_for(first + i, round_) for i in range(6)]))
            print(f"A {info.first_offset} {info.last_offset}", flush=True)
        lg.roll()
        now += 1
        print("C", flush=True)  # a cleaning starts
        m.cleaner.clean_once(cleaner, now=now)


if __name__ == "__main__":
    main()
