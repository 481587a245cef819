"""Child process for crash tests: appends deterministic batches to a log until it is killed.

Prints ``A <first> <last>`` after each append and ``F <recovery point>`` after each flush,
one line at a time, so the parent knows what was acknowledged and what was made durable.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pybroker.log import Log, LogConfig  # noqa: E402
from tests.logutil import batch_for  # noqa: E402


def main() -> None:
    directory, recovery_point, start_seq, count, flush_every = sys.argv[1:6]
    config = LogConfig(segment_bytes=int(sys.argv[6]), index_interval_bytes=256, retention_ms=-1)
    lg = Log(directory, "t", 0, config, recovery_point=int(recovery_point), clean=False)
    print(f"R {lg.log_end_offset}", flush=True)
    for i in range(int(count)):
        seq = int(start_seq) + i
        info = lg.append(batch_for(seq))
        print(f"A {info.first_offset} {info.last_offset} {seq}", flush=True)
        if (i + 1) % int(flush_every) == 0:
            print(f"F {lg.flush()}", flush=True)
    print("D", flush=True)
    sys.stdin.read()  # wait for the parent's kill: never a clean close


if __name__ == "__main__":
    main()
