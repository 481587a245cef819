"""Kafka's ``sasl.jaas.config`` syntax: ``<LoginModule class> <flag> (key=value)* ;``.

Values are bare words or double-quoted strings (backslash escapes the next character); ``//`` and
``/* */`` comments are skipped. One value may hold several entries; a broker listener takes one.
"""
import re
from typing import NamedTuple

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r"""
    \s+ | //[^\n]* | /\*.*?\*/              # skipped
  | (?P<word>[A-Za-z0-9_$.\-]+)
  | "(?P<quoted>(?:[^"\\]|\\.)*)"
  | (?P<punct>[=;])
""", re.VERBOSE | re.DOTALL)


class JaasEntry(NamedTuple):
    module: str
    flag: str
    options: dict

    def __repr__(self) -> str:  # options hold passwords
        return f"JaasEntry({self.module!r}, {self.flag!r}, keys={sorted(self.options)})"


def _tokens(text: str):
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected character at position {pos} (quote values holding it)")
        pos = m.end()
        if m.group("word") is not None:
            yield "word", m.group("word")
        elif m.group("quoted") is not None:
            yield "word", re.sub(r"\\(.)", r"\1", m.group("quoted"))
        elif m.group("punct") is not None:
            yield m.group("punct"), m.group("punct")


def parse(text: str) -> list[JaasEntry]:
    """Every entry of a JAAS config value; ValueError (without any option value) when malformed."""
    tokens = list(_tokens(text))
    entries, i = [], 0
    while i < len(tokens):
        kind, module = tokens[i]
        if kind != "word":
            raise ValueError(f"expected a login module class, got {module!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
            raise ValueError(f"login module control flag not specified for {module}")
        flag = tokens[i + 1][1].lower()
        if flag not in FLAGS:
            raise ValueError(f"invalid login module control flag {tokens[i + 1][1]!r}")
        i += 2
        options = {}
        while i < len(tokens) and tokens[i][0] != ";":
            key = tokens[i][1]
            if (tokens[i][0] != "word" or i + 2 >= len(tokens) or tokens[i + 1][0] != "="
                    or tokens[i + 2][0] != "word"):
                raise ValueError(f"value not specified for key {key!r}")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError("JAAS config entry not terminated by a semicolon")
        i += 1
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise ValueError("no login module in the JAAS config")
    return entries


def parse_one(text: str) -> JaasEntry:
    entries = parse(text)
    if len(entries) != 1:
        raise ValueError(f"the JAAS config holds {len(entries)} login modules; a listener takes exactly one")
    return entries[0]
