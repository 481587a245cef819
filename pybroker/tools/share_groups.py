"""``pybroker share-groups``: kafka-share-groups.sh (Kafka 4.2) against a cluster, through the admin client.

- ``--list [--state [STATES]]``: the share groups (with ``--state``: GROUP STATE, optionally only
  groups in the comma-separated states).
- ``--describe (--group G... | --all-groups)``: ``--offsets`` (the default; GROUP TOPIC PARTITION
  START-OFFSET LAG, ``--verbose`` adds LEADER-EPOCH), ``--members`` (GROUP CONSUMER-ID HOST CLIENT-ID
  #PARTITIONS ASSIGNMENT; ``--verbose`` adds MEMBER-EPOCH) or ``--state`` (GROUP COORDINATOR (ID) STATE
  #MEMBERS; ``--verbose`` adds GROUP-EPOCH and ASSIGNMENT-EPOCH).
- ``--reset-offsets --group G (--topic T[:P,...]... | --all-topics) (--to-earliest | --to-latest |
  --to-offset N | --to-datetime DT | --to-current) [--dry-run | --execute]``: moves the share-partition
  start offsets of an empty group (AlterShareGroupOffsets); without ``--execute`` only shows them.
- ``--delete (--group G... | --all-groups)``: deletes empty share groups and their state.
- ``--delete-offsets --group G --topic T...``: deletes the group's state of whole topics.

Tables print as Kafka's tool prints them: a blank line, then each row with its columns left-justified
to Kafka's widths (at least 15 for names).
"""
import datetime
import sys

from pybroker.protocol.errors import ErrorCode

STATES = ("Empty", "Stable", "Dead", "Unknown")
MISSING = "-"


def add_parser(sub) -> None:
    from pybroker.tools import _runner
    p = sub.add_parser("share-groups", help="list, describe, reset and delete share groups (kafka-share-groups)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties (security settings) for the tool")
    p.add_argument("--timeout", "--command-timeout-ms", dest="timeout", type=int, default=30000, metavar="MS",
                   help="timeout of each admin call (default 30000)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the share groups")
    action.add_argument("--describe", action="store_true", help="describe share groups (offsets by default)")
    action.add_argument("--delete", action="store_true", help="delete empty share groups")
    action.add_argument("--reset-offsets", action="store_true", help="move the start offsets of an empty group")
    action.add_argument("--delete-offsets", action="store_true", help="delete a group's state of whole topics")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--group", action="append", metavar="GROUP", help="the share group; repeatable")
    which.add_argument("--all-groups", action="store_true", help="describe/delete every share group")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                   help="reset-offsets/delete-offsets: a topic (reset-offsets: optionally some partitions)")
    p.add_argument("--all-topics", action="store_true", help="reset-offsets: every topic the group has state for")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="describe: the members")
    view.add_argument("--offsets", action="store_true", help="describe: the start offsets and lag (default)")
    view.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                      help="describe: coordinator, state and size; list: show (and filter by) the state")
    p.add_argument("--verbose", action="store_true", help="describe: more columns")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    to.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (kept within the log)")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="reset to the first offset at or after this time (local time unless a zone is given)")
    to.add_argument("--to-current", action="store_true", help="reset to the current start offsets")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="reset-offsets: only show the new offsets (default)")
    mode.add_argument("--execute", action="store_true", help="reset-offsets: apply them")
    p.set_defaults(func=_runner("share_groups"))


def run(args) -> int:
    from pybroker.client import AdminClient, ConfigError, KafkaError
    from pybroker.tools.wire import ToolError
    _check_args(args)
    try:
        admin = AdminClient(_admin_conf(args))
    except ConfigError as exc:
        raise ToolError(str(exc)) from None
    try:
        if args.list:
            return list_groups(admin, args)
        if args.describe:
            return describe(admin, args)
        if args.delete:
            return delete(admin, args)
        if args.reset_offsets:
            return reset_offsets(admin, args)
        return delete_offsets(admin, args)
    except KafkaError as exc:
        raise ToolError(f"Executing share group command failed due to {_message(exc)}") from None
    finally:
        admin.close()


def _check_args(args) -> None:
    from pybroker.tools.wire import ToolError
    needs_group = args.describe or args.delete or args.reset_offsets or args.delete_offsets
    if needs_group and not args.group and not args.all_groups:
        raise ToolError("the action needs --group (or --all-groups)")
    if (args.reset_offsets or args.delete_offsets) and (args.all_groups or len(args.group or []) != 1):
        raise ToolError("--reset-offsets and --delete-offsets take exactly one --group")
    if args.delete_offsets and not args.topic:
        raise ToolError("--delete-offsets needs --topic")
    if args.reset_offsets:
        if bool(args.topic) == bool(args.all_topics):
            raise ToolError("--reset-offsets needs --topic or --all-topics")
        if not (args.to_earliest or args.to_latest or args.to_current or args.to_offset is not None
                or args.to_datetime is not None):
            raise ToolError("--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                            "--to-current")
    if args.state not in (None, "") and not args.list:
        raise ToolError("--state takes states only with --list")


def _admin_conf(args) -> dict:
    from pybroker.tools.wire import command_client_conf
    return command_client_conf(args.bootstrap_server, args.command_config, args.timeout, "pybroker-share-groups")


def _message(exc) -> str:
    """A KafkaError or KafkaErrors as one line."""
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(f"{k}: {e.message}" for k, e in errors.items())
    return getattr(exc, "message", str(exc))


def _lines(fmt_widths: list, rows: list) -> None:
    """Kafka's printf layout: each row on a new line after a blank one; columns ``%-Ns`` then a space."""
    for row in rows:
        cells = [str(c) for c in row]
        print("".join(c.ljust(w) + " " for c, w in zip(cells[:-1], fmt_widths)) + cells[-1])


def _share_group_ids(admin) -> list:
    return sorted(g.group_id for g in admin.list_groups(types=["share"]))


# ---- list ----------------------------------------------------------------------------------------

def list_groups(admin, args) -> int:
    listings = sorted(admin.list_groups(types=["share"]), key=lambda g: g.group_id)
    if args.state is None:
        for g in listings:
            print(g.group_id)
        return 0
    wanted = _states(args.state)
    if wanted:
        listings = [g for g in listings if g.state.lower() in wanted]
    width = max([15] + [len(g.group_id) for g in listings])
    _lines([width], [["GROUP", "STATE"]] + [[g.group_id, g.state or "Unknown"] for g in listings])
    return 0


def _states(text: str) -> set:
    from pybroker.tools.wire import ToolError
    states = {s.strip().lower() for s in text.split(",") if s.strip()}
    bad = sorted(s for s in states if s not in {x.lower() for x in STATES})
    if bad:
        raise ToolError(f"Invalid state list '{text}'. Valid states are: {', '.join(STATES)}")
    return states


# ---- describe ------------------------------------------------------------------------------------

def _describe_all(admin, groups: list) -> dict:
    from pybroker.client import KafkaErrors
    try:
        return admin.describe_share_groups(groups)
    except KafkaErrors as exc:
        missing = [g for g, e in exc.errors.items() if e.code == ErrorCode.GROUP_ID_NOT_FOUND]
        for g in missing:
            print(f"\nError: Share group '{g}' does not exist.")
        other = {g: e for g, e in exc.errors.items() if g not in missing}
        if other:
            raise
        return exc.results


def describe(admin, args) -> int:
    groups = _share_group_ids(admin) if args.all_groups else list(dict.fromkeys(args.group))
    described = _describe_all(admin, groups)
    status = 0 if len(described) == len(groups) else 1
    for group in sorted(described):
        desc = described[group]
        if args.members:
            _print_members(group, desc, args.verbose)
        elif args.state is not None:
            _print_state(admin, group, desc, args.verbose)
        else:
            _print_offsets(admin, group, args.verbose)
    return status


def _empty_note(group: str, desc) -> bool:
    """Kafka's note for an empty group (on stderr); True when there are members to show."""
    if desc.state == "Empty":
        print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
    return desc.state != "Dead" and bool(desc.members)


def _assignment(tps) -> str:
    by_topic: dict = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in by_topic.items()))


def _print_members(group: str, desc, verbose: bool) -> None:
    if not _empty_note(group, desc):
        return
    members = sorted(desc.members, key=lambda m: m.member_id)
    widths = [max(15, len(group)), max([15] + [len(m.member_id) for m in members]),
              max([15] + [len(m.client_host) for m in members]), max([15] + [len(m.client_id) for m in members]), 12]
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = []
    for m in members:
        row = [group, m.member_id, m.client_host, m.client_id, len(m.assignment)]
        if verbose:
            row.append(m.member_epoch)
        rows.append(row + [_assignment(m.assignment)])
    if verbose:
        header.append("MEMBER-EPOCH")
        widths.append(13)
    print()
    _lines(widths, [header + ["ASSIGNMENT"]] + rows)


def _print_state(admin, group: str, desc, verbose: bool) -> None:
    _empty_note(group, desc)
    broker = admin.list_topics().brokers.get(desc.coordinator)
    coordinator = f"{broker.host}:{broker.port}  ({desc.coordinator})" if broker is not None else \
        f"-  ({desc.coordinator})"
    widths = [max(15, len(group)), max(25, len(coordinator)), 15]
    if verbose:
        widths += [12, 17]
        rows = [["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"],
                [group, coordinator, desc.state, desc.group_epoch, desc.assignment_epoch, len(desc.members)]]
    else:
        rows = [["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"], [group, coordinator, desc.state,
                                                                     len(desc.members)]]
    print()
    _lines(widths, rows)


def _print_offsets(admin, group: str, verbose: bool) -> None:
    offsets = admin.list_share_group_offsets(group)
    if not offsets:
        print(f"\nShare group '{group}' has no offset information.")
        return
    widths = [max(15, len(group)), max([15] + [len(tp.topic) for tp in offsets]), 10]
    header = ["GROUP", "TOPIC", "PARTITION"]
    if verbose:
        header.append("LEADER-EPOCH")
        widths.append(13)
    widths.append(13)
    rows = []
    for tp in sorted(offsets):
        info = offsets[tp]
        known = info.start_offset >= 0
        row = [group, tp.topic, tp.partition]
        if verbose:
            row.append(info.leader_epoch if known and info.leader_epoch >= 0 else MISSING)
        row += [info.start_offset if known else MISSING, info.lag if known and info.lag >= 0 else MISSING]
        rows.append(row)
    print()
    _lines(widths, [header + ["START-OFFSET", "LAG"]] + rows)


# ---- reset ---------------------------------------------------------------------------------------

def reset_offsets(admin, args) -> int:
    from pybroker.client import KafkaErrors
    from pybroker.tools.wire import ToolError
    group = args.group[0]
    try:
        desc = admin.describe_share_groups([group])[group]
        if desc.state not in ("Empty", "Dead"):
            raise ToolError(f"Share group '{group}' is not empty.")
    except KafkaErrors as exc:
        if any(e.code != ErrorCode.GROUP_ID_NOT_FOUND for e in exc.errors.values()):
            raise
    partitions = _partitions_to_reset(admin, group, args)
    if not partitions:
        raise ToolError("no partitions to reset")
    offsets = _new_offsets(admin, group, partitions, args)
    if args.execute:
        admin.alter_share_group_offsets(group, offsets)
    widths = [max(15, len(group)), max([15] + [len(tp.topic) for tp in offsets]), 10]
    print()
    _lines(widths, [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
           + [[group, tp.topic, tp.partition, o] for tp, o in sorted(offsets.items())])
    return 0


def _partitions_to_reset(admin, group: str, args) -> list:
    from pybroker.client import TopicPartition
    from pybroker.tools.wire import ToolError
    if args.all_topics:
        return sorted(admin.list_share_group_offsets(group))
    out = []
    named = {}
    for spec in args.topic:
        topic, sep, parts = spec.partition(":")
        if sep:
            try:
                out += [TopicPartition(topic, int(p)) for p in parts.split(",") if p.strip()]
            except ValueError:
                raise ToolError(f"--topic {spec!r}: partitions must be numbers") from None
        else:
            named[topic] = None
    if named:
        described = admin.describe_topics(sorted(named))
        for topic in sorted(named):
            meta = described.get(topic)
            if meta is None:
                raise ToolError(f"topic {topic!r} does not exist")
            out += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    return sorted(set(out))


def _new_offsets(admin, group: str, partitions: list, args) -> dict:
    from pybroker.client import EARLIEST, LATEST
    from pybroker.tools.wire import ToolError
    if args.to_current:
        current = admin.list_share_group_offsets(group, partitions)
        return {tp: current[tp].start_offset for tp in partitions if tp in current and current[tp].start_offset >= 0}
    earliest = {tp: r.offset for tp, r in admin.list_offsets({tp: EARLIEST for tp in partitions}).items()}
    latest = {tp: r.offset for tp, r in admin.list_offsets({tp: LATEST for tp in partitions}).items()}
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_offset is not None:
        out = {}
        for tp in partitions:
            o = min(max(args.to_offset, earliest[tp]), latest[tp])
            if o != args.to_offset:
                side = "lower than earliest" if o > args.to_offset else "higher than latest"
                print(f"WARN: New offset ({args.to_offset}) is {side} offset for topic partition "
                      f"{tp.topic}-{tp.partition}. Value will be set to {o}", file=sys.stderr)
            out[tp] = o
        return out
    try:
        when = datetime.datetime.fromisoformat(args.to_datetime)
    except ValueError:
        raise ToolError(f"--to-datetime {args.to_datetime!r}: expected YYYY-MM-DDTHH:mm:SS.sss (optionally with "
                        "a zone such as Z or +01:00)") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool reads it
    ms = int(when.timestamp() * 1000)
    found = admin.list_offsets({tp: ms for tp in partitions})
    return {tp: (found[tp].offset if found[tp].offset >= 0 else latest[tp]) for tp in partitions}


# ---- delete --------------------------------------------------------------------------------------

def delete(admin, args) -> int:
    from pybroker.client import KafkaErrors
    listings = {g.group_id: g for g in admin.list_groups(types=["share"])}
    groups = sorted(listings) if args.all_groups else list(dict.fromkeys(args.group))
    failed = {}
    for g in groups:
        if g not in listings:
            failed[g] = f"Group '{g}' is not a share group."
        elif listings[g].state and listings[g].state not in ("Empty",):
            failed[g] = f"Share group '{g}' is not EMPTY." if listings[g].state != "Dead" else \
                f"Share group '{g}' group state is DEAD."
    todo = [g for g in groups if g not in failed]
    deleted = []
    if todo:
        try:
            deleted = list(admin.delete_share_groups(todo))
        except KafkaErrors as exc:
            deleted = list(exc.results)
            failed.update({g: e.message for g, e in exc.errors.items()})
    if not failed:
        print("Deletion of requested share groups (" + ", ".join(f"'{g}'" for g in deleted) + ") was successful.")
        return 0
    print("\nError: Deletion of some share groups failed:")
    for g, why in failed.items():
        print(f"* Group '{g}' could not be deleted due to: {why}")
    if deleted:
        print("\nThese share groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted))
    return 1


def delete_offsets(admin, args) -> int:
    from pybroker.client import KafkaError, KafkaErrors
    group = args.group[0]
    topics = sorted(set(args.topic))
    status = 0
    try:
        results = {t: None for t in admin.delete_share_group_offsets(group, topics)}
    except KafkaErrors as exc:
        results = {**{t: None for t in exc.results}, **{t: e.message for t, e in exc.errors.items()}}
        status = 1
    except KafkaError as exc:
        print(f"\nError: {exc.message}")
        return 1
    for t in topics:
        results.setdefault(t, "the broker sent no result for it")
    width = max([15] + [len(t) for t in results])
    print()
    _lines([width], [["TOPIC", "STATUS"]] + [[t, "Successful" if e is None else f"Error: {e}"]
                                             for t, e in sorted(results.items())])
    return status
