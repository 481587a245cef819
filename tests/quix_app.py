"""A stateful quixstreams application, run as its own process by tests/interop/test_quixstreams.py.

usage: python tests/quix_app.py BOOTSTRAP GROUP INPUT OUTPUT STATE_DIR WINDOW_MS BATCH_BYTES

It runs in a virtualenv of its own (tests/quix_env.py), so the test passes its constants in.

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



def running_totals(value: dict, state: State) -> dict:
    totals = state.get("totals", {"sum": 0, "count": 0})
    totals = {"sum": totals["sum"] + value["amount"], "count": totals["count"] + 1}
    state.set("totals", totals)
    return {"kind": "running", **totals}


def closed_window(window: dict) -> dict:
    return {"kind": "window", "start": window["start"], "end": window["end"],
            "sum": window["sum"], "count": window["count"]}


def build(bootstrap: str, group: str, input_topic: str, output_topic: str, state_dir: str, window_ms: int,
          batch_bytes: int) -> Application:
    # commit_interval: a short checkpoint, so that each input round of the test gets its own commit
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      state_dir=state_dir, commit_interval=0.5, loglevel="INFO",
                      producer_extra_config={"batch.size": batch_bytes})
    source = app.topic(input_topic, key_deserializer="str", value_deserializer="json")
    sink = app.topic(output_topic, key_serializer="str", value_serializer="json")
    sdf = app.dataframe(source)
    sdf.apply(running_totals, stateful=True).to_topic(sink)
    (sdf.tumbling_window(duration_ms=window_ms)
        .agg(sum=Sum("amount"), count=Count())
        .final()
        .apply(closed_window)
        .to_topic(sink))
    return app


def main(argv: list[str]) -> None:
    bootstrap, group, input_topic, output_topic, state_dir, window_ms, batch_bytes = argv
    build(bootstrap, group, input_topic, output_topic, state_dir, int(window_ms), int(batch_bytes)).run()


if __name__ == "__main__":
    main(sys.argv[1:])
