"""``pybroker schemas``: the schema registry from the command line, over its REST API.

::

    pybroker schemas [--registry URL] [--user USER:PASSWORD] [--ca-file PEM] ACTION ...

    list [--deleted] [--prefix P]                         subjects, one per line
    versions SUBJECT [--deleted]                          a subject's versions, one per line
    get SUBJECT [VERSION] [--schema-only]                 a version (default latest) as JSON
    get --id ID [--schema-only]                           a schema by its global id
    register SUBJECT FILE [--type T] [--reference NAME=SUBJECT:VERSION ...] [--normalize]
    delete SUBJECT [--version V] [--permanent]            soft delete (a permanent one soft-deletes first)
    compatibility SUBJECT FILE [--version V] [--type T] [--reference ...]
    config [SUBJECT] [--set LEVEL | --delete]             compatibility level (global without SUBJECT)
    mode [SUBJECT] [--set MODE [--force] | --delete]      READWRITE, READONLY or IMPORT

``FILE`` is a schema file (``-``: stdin); its type is ``--type`` or follows its extension (``.avsc``
Avro, ``.json`` JSON Schema, ``.proto`` Protobuf; Avro otherwise). ``--registry`` defaults to
``http://127.0.0.1:8081``; ``--user`` sends HTTP basic credentials (the broker's SASL users when its
security is on); ``--ca-file`` trusts that CA for https. Answers are printed as the registry gives
them (JSON), lists one item per line. An error answer is printed as ``error CODE: message`` with exit
code 1; ``compatibility`` exits with 1 as well when the schema is not compatible.
"""
import argparse
import json
import os
import ssl
import sys
import urllib.parse

DEFAULT_REGISTRY = "http://127.0.0.1:8081"
TYPES_BY_EXTENSION = {".avsc": "AVRO", ".avro": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
SOFT_DELETED = (40404, 40406)  # subject / version already soft-deleted: a permanent delete can follow


def add_parser(sub) -> None:
    p = sub.add_parser("schemas", help="list, get, register and delete schemas; compatibility and config "
                                       "(the schema registry's REST API)")
    p.add_argument("--registry", default=DEFAULT_REGISTRY, metavar="URL",
                   help=f"the registry's base URL (default {DEFAULT_REGISTRY})")
    p.add_argument("--user", metavar="USER:PASSWORD", help="HTTP basic authentication")
    p.add_argument("--ca-file", metavar="PEM", help="CA certificates to trust for an https registry")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="per request (default 30)")
    actions = p.add_subparsers(dest="action", required=True)

    a = actions.add_parser("list", help="subjects, one per line")
    a.add_argument("--deleted", action="store_true", help="include soft-deleted subjects")
    a.add_argument("--prefix", help="only subjects starting with this")

    a = actions.add_parser("versions", help="a subject's versions, one per line")
    a.add_argument("subject")
    a.add_argument("--deleted", action="store_true", help="include soft-deleted versions")

    a = actions.add_parser("get", help="a subject's version (default latest), or a schema by --id")
    a.add_argument("subject", nargs="?")
    a.add_argument("version", nargs="?", default="latest")
    a.add_argument("--id", type=int, help="the schema's global id (instead of SUBJECT)")
    a.add_argument("--schema-only", action="store_true", help="print only the schema text")
    a.add_argument("--deleted", action="store_true", help="a soft-deleted version too")

    a = actions.add_parser("register", help="register a schema file under a subject; prints its id")
    a.add_argument("subject")
    a.add_argument("file", help="the schema file, - for stdin")
    _schema_options(a)
    a.add_argument("--normalize", action="store_true", help="normalize the schema before storing and comparing")

    a = actions.add_parser("delete", help="delete a subject (all versions) or one --version")
    a.add_argument("subject")
    a.add_argument("--version", help="only this version (a number or latest)")
    a.add_argument("--permanent", action="store_true", help="hard delete (soft-deletes first when needed)")

    a = actions.add_parser("compatibility", help="is a schema file compatible with a subject's version(s)")
    a.add_argument("subject")
    a.add_argument("file", help="the schema file, - for stdin")
    a.add_argument("--version", default=None,
                   help="test against this version (default: the versions the subject's level names)")
    _schema_options(a)

    a = actions.add_parser("config", help="show or set the compatibility level (global without SUBJECT)")
    a.add_argument("subject", nargs="?")
    c = a.add_mutually_exclusive_group()
    c.add_argument("--set", type=str.upper, choices=LEVELS, metavar="LEVEL", help=", ".join(LEVELS))
    c.add_argument("--delete", action="store_true", help="remove the subject's (or the global) level")

    a = actions.add_parser("mode", help="show or set the mode (global without SUBJECT)")
    a.add_argument("subject", nargs="?")
    c = a.add_mutually_exclusive_group()
    c.add_argument("--set", type=str.upper, choices=MODES, metavar="MODE", help=", ".join(MODES))
    c.add_argument("--delete", action="store_true", help="remove the subject's mode")
    a.add_argument("--force", action="store_true", help="--set IMPORT on a registry that has schemas")
    p.set_defaults(func=main)


def _schema_options(a) -> None:
    a.add_argument("--type", type=str.upper, choices=("AVRO", "JSON", "PROTOBUF"),
                   help="the schema's type (default: from the file's extension, else AVRO)")
    a.add_argument("--reference", action="append", default=[], metavar="NAME=SUBJECT:VERSION",
                   help="a schema it references (Avro: the full type name, Protobuf: the import path, "
                        "JSON: the $ref URL); VERSION may be latest; repeatable")


class UsageError(Exception):
    """A mistake in the command's own arguments or files (reported like a registry error, exit code 1)."""


def _client(args):
    from pybroker.client.schema_registry import RegistryClient
    if args.user is not None and ":" not in args.user:
        raise UsageError("--user takes USER:PASSWORD")
    try:
        return RegistryClient(args.registry, args.user, args.ca_file, args.timeout)
    except (ValueError, OSError, ssl.SSLError) as exc:  # a bad URL, an unreadable --ca-file
        raise UsageError(str(exc)) from None


def _describe(exc) -> str:
    """A registry error as the command prints it: Confluent's code and message."""
    if exc.status == 0:
        return f"cannot reach the registry: {exc.message}"
    return f"error {exc.error_code}: {exc.message}"


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _read_schema(args, http) -> dict:
    """The request body of a schema file: schema, schemaType (not for Avro), references."""
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    schema_type = args.type or TYPES_BY_EXTENSION.get(os.path.splitext(args.file)[1].lower(), "AVRO")
    body = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    refs = [_reference(text, http) for text in args.reference]
    if refs:
        body["references"] = refs
    return body


def _reference(text: str, http) -> dict:
    name, sep, rest = text.partition("=")
    subject, colon, version = rest.rpartition(":")
    if not sep or not name or not colon or not subject or not version:
        raise UsageError(f"--reference {text!r}: expected NAME=SUBJECT:VERSION")
    if version.lower() == "latest":
        version = http.request("GET", f"/subjects/{_quote(subject)}/versions/latest")["version"]
    elif not version.isdigit():
        raise UsageError(f"--reference {text!r}: the version must be a number or latest")
    return {"name": name, "subject": subject, "version": int(version)}


def _print_json(value) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def run(args) -> int:
    from pybroker.client.schema_registry import RegistryError
    http = _client(args)
    action = args.action
    if action == "list":
        query = {"deleted": args.deleted or None, "subjectPrefix": args.prefix}
        for subject in http.request("GET", "/subjects", query=query):
            print(subject)
    elif action == "versions":
        for version in http.request("GET", f"/subjects/{_quote(args.subject)}/versions",
                                    query={"deleted": args.deleted or None}):
            print(version)
    elif action == "get":
        if args.id is not None:
            if args.subject is not None:
                raise UsageError("get takes SUBJECT [VERSION] or --id ID, not both")
            answer = http.request("GET", f"/schemas/ids/{args.id}")
        elif args.subject is None:
            raise UsageError("get needs SUBJECT [VERSION] or --id ID")
        else:
            answer = http.request("GET", f"/subjects/{_quote(args.subject)}/versions/{_quote(args.version)}",
                                  query={"deleted": args.deleted or None})
        if args.schema_only:
            print(answer["schema"])
        else:
            _print_json(answer)
    elif action == "register":
        body = _read_schema(args, http)
        _print_json(http.request("POST", f"/subjects/{_quote(args.subject)}/versions", body,
                                 {"normalize": args.normalize or None}))
    elif action == "delete":
        path = f"/subjects/{_quote(args.subject)}"
        if args.version is not None:
            path += f"/versions/{_quote(args.version)}"
        if args.permanent:  # Confluent's rule: soft first, then permanent
            try:
                http.request("DELETE", path)
            except RegistryError as exc:
                if exc.error_code not in SOFT_DELETED:
                    raise
        _print_json(http.request("DELETE", path, query={"permanent": args.permanent or None}))
    elif action == "compatibility":
        body = _read_schema(args, http)
        path = f"/compatibility/subjects/{_quote(args.subject)}/versions"
        if args.version is not None:
            path += f"/{_quote(args.version)}"
        answer = http.request("POST", path, body, {"verbose": True})
        _print_json(answer)
        return 0 if answer.get("is_compatible") else 1
    elif action in ("config", "mode"):
        path = f"/{action}" + (f"/{_quote(args.subject)}" if args.subject else "")
        if args.set is not None:
            body = {"compatibility": args.set} if action == "config" else {"mode": args.set}
            answer = http.request("PUT", path, body, {"force": getattr(args, "force", False) or None})
        elif args.delete:
            answer = http.request("DELETE", path)
        else:
            answer = http.request("GET", path)
        _print_json(answer)
    return 0


def main(args) -> int:
    from pybroker.client.schema_registry import RegistryError
    try:
        return run(args)
    except RegistryError as exc:
        print(f"pybroker schemas: {_describe(exc)}", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"pybroker schemas: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # python -m pybroker.tools.schemas ...
    parser = argparse.ArgumentParser(prog="pybroker")
    add_parser(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args()
    sys.exit(parsed.func(parsed))
