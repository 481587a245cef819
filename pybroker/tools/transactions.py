"""``pybroker transactions``: kafka-transactions.sh against a cluster.

- ``list [--duration-filter MS]``: ListTransactions on every broker (each coordinates some ids).
- ``describe --transactional-id ID``: DescribeTransactions on the id's transaction coordinator.
- ``describe-producers --topic T --partition P [--broker-id B]``: DescribeProducers on the
  partition's leader (or broker B): the producers with state in the partition.
- ``abort --topic T --partition P (--start-offset N | --producer-id I --producer-epoch E
  --coordinator-epoch C)``: writes an ABORT marker (WriteTxnMarkers) on the partition's leader
  for a hanging transaction; with ``--start-offset`` the producer whose open transaction starts
  there is looked up with DescribeProducers.
- ``find-hanging --broker-id B [--max-transaction-timeout MIN]``: open transactions on B's
  partitions older than the timeout that their coordinator no longer has in progress.

Tables print as Kafka's tool prints them: every cell padded to its column's width, then a tab.
"""
import sys
import time

from pybroker.protocol import REQUESTS
from pybroker.protocol.errors import ErrorCode

WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 61, 65, 66
FIND_COORDINATOR, TRANSACTION_KEY = 10, 1
TOOL_VERSIONS = {WRITE_TXN_MARKERS: (0, 1), DESCRIBE_PRODUCERS: (0, 0), DESCRIBE_TRANSACTIONS: (0, 0),
                 LIST_TRANSACTIONS: (0, 1), FIND_COORDINATOR: (0, 4)}
COORDINATOR_RETRIABLE = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NOT_COORDINATOR}
RETRY_PAUSE_S = 0.1
ONGOING = "Ongoing"


def add_parser(sub) -> None:
    from pybroker.tools import _runner
    p = sub.add_parser("transactions", help="list, describe and abort transactions (kafka-transactions)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties (security settings) for the tool")
    p.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS")
    cmds = p.add_subparsers(dest="transactions_command", required=True)
    c = cmds.add_parser("list", help="list transactions")
    c.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="only transactions running longer than this (ms); < 0: all")
    c = cmds.add_parser("describe", help="describe one transaction's state")
    c.add_argument("--transactional-id", required=True)
    c = cmds.add_parser("describe-producers", help="the producers active on a partition")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, required=True)
    c.add_argument("--broker-id", type=int, default=None, help="ask this replica instead of the leader")
    c = cmds.add_parser("abort", help="abort a hanging transaction (writes an ABORT marker)")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, required=True)
    c.add_argument("--start-offset", type=int, default=None, help="the open transaction's first offset")
    c.add_argument("--producer-id", type=int, default=None)
    c.add_argument("--producer-epoch", type=int, default=None)
    c.add_argument("--coordinator-epoch", type=int, default=None)
    c = cmds.add_parser("find-hanging", help="find hanging transactions on a broker")
    c.add_argument("--broker-id", type=int, required=True)
    c.add_argument("--topic", default=None)
    c.add_argument("--partition", type=int, default=None)
    c.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="transactions open longer than this are candidates (default 15)")
    p.set_defaults(func=_runner("transactions"))


def run(args) -> int:
    from pybroker.tools import wire
    with wire.Client(args.bootstrap_server, args.command_timeout_ms) as client:
        command = {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
                   "abort": _abort, "find-hanging": _find_hanging}[args.transactions_command]
        return command(client, args)


def print_table(header: list, rows: list, out=None) -> None:
    """Kafka's tool layout: each cell left-justified to its column's width, followed by a tab."""
    out = out or sys.stdout
    cells = [[str(x) for x in header]] + [[str(x) for x in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        out.write("".join(c.ljust(w) + "\t" for c, w in zip(r, widths)) + "\n")


def _version(conn, api_key: int) -> int:
    from pybroker.tools.wire import ToolError
    lo, hi = TOOL_VERSIONS[api_key]
    blo, bhi = conn.broker_versions.get(api_key, (0, -1))
    if max(lo, blo) > min(hi, bhi):
        name = REQUESTS[api_key].__name__.removesuffix("Request")
        raise ToolError(f"broker {conn.address} does not support {name}")
    return min(hi, bhi)


# ---- list / describe ------------------------------------------------------------------------

def _list(client, args) -> int:
    from pybroker.tools.wire import check
    client.metadata([])
    rows = []
    for node_id in sorted(client.brokers):
        conn = client.node_conn(node_id)
        version = _version(conn, LIST_TRANSACTIONS)
        if args.duration_filter >= 0 and version < 1:
            from pybroker.tools.wire import ToolError
            raise ToolError(f"broker {node_id} cannot filter transactions by duration (ListTransactions v0)")
        resp = conn.request(REQUESTS[LIST_TRANSACTIONS](state_filters=[], producer_id_filters=[],
                                                        duration_filter=args.duration_filter), version)
        check(resp.error_code, None, f"ListTransactions on broker {node_id}")
        rows += [(t.transactional_id, node_id, t.producer_id, t.transaction_state) for t in resp.transaction_states]
    print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


def find_transaction_coordinator(client, transactional_id: str):
    """(connection, node id) of the transaction coordinator of ``transactional_id``."""
    from pybroker.tools.wire import check
    conn = client.any_conn()
    api = REQUESTS[FIND_COORDINATOR]
    deadline = time.monotonic() + client.timeout
    while True:
        version = _version(conn, FIND_COORDINATOR)
        if version >= 4:
            resp = conn.request(api(key_type=TRANSACTION_KEY, coordinator_keys=[transactional_id]), version)
            c = resp.coordinators[0] if resp.coordinators else None
            if c is None:
                code, message, node, host, port = ErrorCode.COORDINATOR_NOT_AVAILABLE, None, -1, "", 0
            else:
                code, message, node, host, port = c.error_code, c.error_message, c.node_id, c.host, c.port
        else:
            resp = conn.request(api(key=transactional_id, key_type=TRANSACTION_KEY), version)
            code, message, node, host, port = (resp.error_code, resp.error_message, resp.node_id, resp.host,
                                               resp.port)
        if code in COORDINATOR_RETRIABLE and time.monotonic() < deadline:
            time.sleep(RETRY_PAUSE_S)  # the transaction log partition is loading
            continue
        check(code, message, f"cannot find the transaction coordinator of {transactional_id!r}")
        return client.addr_conn(host, port), node


def describe_transactions(client, transactional_ids: list) -> list:
    """DescribeTransactions' states, each from its id's coordinator (retried while it loads)."""
    out = []
    for tid in transactional_ids:
        deadline = time.monotonic() + client.timeout
        while True:
            conn, node = find_transaction_coordinator(client, tid)
            resp = conn.request(REQUESTS[DESCRIBE_TRANSACTIONS](transactional_ids=[tid]),
                                _version(conn, DESCRIBE_TRANSACTIONS))
            state = resp.transaction_states[0]
            if state.error_code in COORDINATOR_RETRIABLE and time.monotonic() < deadline:
                time.sleep(RETRY_PAUSE_S)
                continue
            out.append((node, state))
            break
    return out


def _describe(client, args) -> int:
    from pybroker.tools.wire import check
    (node, st), = describe_transactions(client, [args.transactional_id])
    check(st.error_code, None, f"cannot describe transactional id {args.transactional_id!r}")
    now = int(time.time() * 1000)
    started = st.transaction_start_time_ms
    partitions = ",".join(f"{t.topic}-{p}" for t in st.topics for p in t.partitions)
    print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
                [(node, st.transactional_id, st.producer_id, st.producer_epoch, st.transaction_state,
                  st.transaction_timeout_ms, started if started >= 0 else "None",
                  now - started if started >= 0 else "None", partitions)])
    return 0


# ---- producers on partitions ----------------------------------------------------------------

def describe_producers(client, topic: str, partition: int, broker_id=None) -> list:
    """The ProducerStates of a partition, from its leader (or ``broker_id``)."""
    from pybroker.tools.wire import check
    if broker_id is None:
        t = client.topic_metadata(topic)
        p = next((x for x in t.partitions if x.partition_index == partition), None)
        if p is None:
            check(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, f"partition {topic}-{partition}")
        broker_id = p.leader_id
    else:
        client.metadata([])
    conn = client.node_conn(broker_id)
    api = REQUESTS[DESCRIBE_PRODUCERS]
    resp = conn.request(api(topics=[api.TopicRequest(name=topic, partition_indexes=[partition])]),
                        _version(conn, DESCRIBE_PRODUCERS))
    for t in resp.topics:
        for p in t.partitions:
            check(p.error_code, p.error_message, f"cannot describe producers of {topic}-{partition}")
            return list(p.active_producers)
    return []


def _describe_producers(client, args) -> int:
    rows = [(s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
             s.current_txn_start_offset if s.current_txn_start_offset >= 0 else "None")
            for s in describe_producers(client, args.topic, args.partition, args.broker_id)]
    print_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                 "CurrentTransactionStartOffset"], rows)
    return 0


def _abort(client, args) -> int:
    from pybroker.tools.wire import ToolError
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None:
        if any(x is not None for x in explicit):
            raise ToolError("abort takes --start-offset or --producer-id/--producer-epoch/--coordinator-epoch")
        match = [s for s in describe_producers(client, args.topic, args.partition)
                 if s.current_txn_start_offset == args.start_offset]
        if not match:
            raise ToolError(f"could not find any open transactions starting at offset {args.start_offset} "
                            f"on partition {args.topic}-{args.partition}")
        s = match[0]
        pid, epoch, coordinator_epoch = s.producer_id, s.producer_epoch, max(0, s.coordinator_epoch)
    elif all(x is not None for x in explicit):
        pid, epoch, coordinator_epoch = explicit
    else:
        raise ToolError("abort needs --start-offset, or all of --producer-id, --producer-epoch and "
                        "--coordinator-epoch")
    write_abort_marker(client, args.topic, args.partition, pid, epoch, coordinator_epoch)
    return 0


def write_abort_marker(client, topic: str, partition: int, pid: int, epoch: int, coordinator_epoch: int) -> None:
    """WriteTxnMarkers(ABORT) for one producer on one partition, sent to its leader."""
    from pybroker.tools.wire import check
    t = client.topic_metadata(topic)
    p = next((x for x in t.partitions if x.partition_index == partition), None)
    if p is None:
        check(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, f"partition {topic}-{partition}")
    conn = client.node_conn(p.leader_id)
    api = REQUESTS[WRITE_TXN_MARKERS]
    marker = api.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=False,
                                   topics=[api.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
                                   coordinator_epoch=coordinator_epoch)
    resp = conn.request(api(markers=[marker]), _version(conn, WRITE_TXN_MARKERS))
    for m in resp.markers:
        for rt in m.topics:
            for rp in rt.partitions:
                check(rp.error_code, None, f"WriteTxnMarkers for producer {pid} epoch {epoch} on "
                                           f"{topic}-{partition}")


# ---- hanging transactions -------------------------------------------------------------------

def _find_hanging(client, args) -> int:
    md = client.metadata(None if args.topic is None else [args.topic])
    now = int(time.time() * 1000)
    limit_ms = args.max_transaction_timeout * 60000
    candidates = []
    for t in md.topics:
        for p in t.partitions:
            if args.broker_id not in p.replica_nodes or (args.partition is not None and
                                                         p.partition_index != args.partition):
                continue
            for s in describe_producers(client, t.name, p.partition_index, args.broker_id):
                if s.current_txn_start_offset >= 0 and now - s.last_timestamp > limit_ms:
                    candidates.append((t.name, p.partition_index, s))
    hanging = [c for c in candidates if not _still_open(client, *c)]
    print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                 "LastTimestamp", "Duration(min)"],
                [(topic, partition, s.producer_id, s.producer_epoch, s.coordinator_epoch, s.current_txn_start_offset,
                  s.last_timestamp, (now - s.last_timestamp) // 60000) for topic, partition, s in hanging])
    return 0


def _still_open(client, topic: str, partition: int, s) -> bool:
    """Whether the producer's coordinator has an ongoing transaction that includes the partition."""
    client.metadata([])
    ids = []
    for node_id in sorted(client.brokers):
        conn = client.node_conn(node_id)
        resp = conn.request(REQUESTS[LIST_TRANSACTIONS](state_filters=[], producer_id_filters=[s.producer_id],
                                                        duration_filter=-1), _version(conn, LIST_TRANSACTIONS))
        ids += [x.transactional_id for x in resp.transaction_states]
    for _, st in describe_transactions(client, ids):
        if st.error_code or st.producer_id != s.producer_id or st.transaction_state != ONGOING:
            continue
        if any(t.topic == topic and partition in t.partitions for t in st.topics):
            return True
    return False
