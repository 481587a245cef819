"""A stateful quixstreams application, run as its own process by tests/test_quixstreams.py.

usage: python tests/quix_app.py BOOTSTRAP GROUP INPUT OUTPUT STATE_DIR

Input values are JSON ``{"amount": int}`` keyed by a string key. Two branches write JSON to OUTPUT,
keyed like the input:
- ``{"kind": "running", "sum": S, "count": N}``: the running totals of the key, kept in ``State``;
- ``{"kind": "window", "start": ms, "end": ms, "sum": S, "count": N}``: a closed tumbling window.
Both keep their state in local RocksDB stores backed by compacted changelog topics. SIGTERM stops
the application cleanly (it commits its checkpoint first).
"""
import sys

from quixstreams import Application, State
from quixstreams.dataframe.windows.aggregations import Count, Sum

WINDOW_MS = 1000
BATCH_BYTES = 512  # producer batches stay below the test broker's small log.segment.bytes


def running_totals(value: dict, state: State) -> dict:
    totals = state.get("totals", {"sum": 0, "count": 0})
    totals = {"sum": totals["sum"] + value["amount"], "count": totals["count"] + 1}
    state.set("totals", totals)
    return {"kind": "running", **totals}


def closed_window(window: dict) -> dict:
    return {"kind": "window", "start": window["start"], "end": window["end"],
            "sum": window["sum"], "count": window["count"]}


def build(bootstrap: str, group: str, input_topic: str, output_topic: str, state_dir: str) -> Application:
    # commit_interval: a short checkpoint, so that each input round of the test gets its own commit
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      state_dir=state_dir, commit_interval=0.5, loglevel="INFO",
                      producer_extra_config={"batch.size": BATCH_BYTES})
    source = app.topic(input_topic, key_deserializer="str", value_deserializer="json")
    sink = app.topic(output_topic, key_serializer="str", value_serializer="json")
    sdf = app.dataframe(source)
    sdf.apply(running_totals, stateful=True).to_topic(sink)
    (sdf.tumbling_window(duration_ms=WINDOW_MS)
        .agg(sum=Sum("amount"), count=Count())
        .final()
        .apply(closed_window)
        .to_topic(sink))
    return app


def main(argv: list[str]) -> None:
    bootstrap, group, input_topic, output_topic, state_dir = argv
    build(bootstrap, group, input_topic, output_topic, state_dir).run()


if __name__ == "__main__":
    main(sys.argv[1:])
