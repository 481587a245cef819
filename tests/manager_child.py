"""Child process: a LogManager with flush.messages=1 that appends until SIGKILLed.

Prints ``A <topic-partition> <last offset> <seq>`` once each append is acknowledged; with
flush.messages=1 an append is acknowledged only after its flush, as a broker would do.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pybroker.log import LogConfig, LogManager  # noqa: E402
from tests.logutil import batch_for  # noqa: E402


def main() -> None:
    log_dir, count = sys.argv[1], int(sys.argv[2])
    manager = LogManager([log_dir], LogConfig(segment_bytes=4096, flush_messages=1, retention_ms=-1)).startup()
    logs = [manager.get_or_create_log("orders", p) for p in range(3)]
    print("R", flush=True)
    for seq in range(count):
        lg = logs[seq % 3]
        info = lg.append(batch_for(seq))
        lg.flush()  # the acknowledgement waits for durability
        print(f"A {seq % 3} {info.last_offset} {seq}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
