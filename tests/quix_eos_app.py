"""A quixstreams application with processing_guarantee="exactly-once", run as its own process.

usage: python tests/quix_eos_app.py BOOTSTRAP GROUP INPUT OUTPUT STATE_DIR TRANSACTIONAL_ID

It runs in the quixstreams virtualenv (tests/quix_env.py). Input values are JSON ``{"amount": int}``
keyed by a string key; for each one it writes ``{"sum": S, "count": N}`` (the key's running totals,
kept in ``State``) to OUTPUT under the same key. Outputs, changelog writes and consumed offsets
commit in one Kafka transaction; a fixed transactional id lets a restarted process fence the one
it replaces.
"""
import sys

from quixstreams import Application, State


def running_totals(value: dict, state: State) -> dict:
    totals = state.get("totals", {"sum": 0, "count": 0})
    totals = {"sum": totals["sum"] + value["amount"], "count": totals["count"] + 1}
    state.set("totals", totals)
    return totals


def main(argv: list[str]) -> None:
    bootstrap, group, input_topic, output_topic, state_dir, txn_id = argv
    # a short session: a restarted process rejoins soon after the one that was killed
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      state_dir=state_dir, commit_interval=0.5, loglevel="INFO",
                      processing_guarantee="exactly-once",
                      producer_extra_config={"transactional.id": txn_id, "transaction.timeout.ms": 10000},
                      consumer_extra_config={"session.timeout.ms": 6000})
    source = app.topic(input_topic, key_deserializer="str", value_deserializer="json")
    sink = app.topic(output_topic, key_serializer="str", value_serializer="json")
    app.dataframe(source).apply(running_totals, stateful=True).to_topic(sink)
    app.run()


if __name__ == "__main__":
    main(sys.argv[1:])
