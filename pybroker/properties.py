"""Java Properties text and typed setting values: the parsing every feature's settings share.

``parse_properties`` reads ``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comment lines; a
line ending in an odd number of backslashes continues on the next one (whose leading whitespace is
dropped); ``\\t \\n \\r \\f \\uXXXX`` escapes. Unlike Java, trailing whitespace of a value is trimmed as
well (Kafka trims nearly every value it parses). A leaf module: broker, clients and tools use it.
"""
import re

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A bad configuration; the message names the key, the bad value and what is allowed."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def parse_int(key: str, value: str, lo: int, hi: int) -> int:
    text = value.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ConfigError(f"{key}={value!r}: expected an integer", key)
    n = int(text)
    if not lo <= n <= hi:
        allowed = f"at least {lo}" if n < lo and hi in (INT_MAX, LONG_MAX) else f"between {lo} and {hi}"
        raise ConfigError(f"{key}={value!r}: must be {allowed}", key)
    return n


def parse_float(key: str, value: str, lo: float, hi: float) -> float:
    try:
        x = float(value.strip())
    except ValueError:
        raise ConfigError(f"{key}={value!r}: expected a number", key) from None
    if not lo <= x <= hi or x != x:
        raise ConfigError(f"{key}={value!r}: must be between {lo} and {hi}", key)
    return x


def parse_bool(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{key}={value!r}: expected true or false", key)
    return text == "true"


def read_properties_file(path: str) -> list[tuple[str, str, int]]:
    """(key, value, line) of a .properties file (UTF-8, else Latin-1: Java's own encoding for them);
    ConfigError when it cannot be read or parsed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text, path)


def parse_properties(text: str, source: str = "<properties>") -> list[tuple[str, str, int]]:
    """(key, value, line number) for each entry of a Java Properties text, in order."""
    lines = re.split(r"\r\n|\r|\n", text)
    out = []
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue  # a comment ending in a backslash does not continue
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        key, value = _split_entry(line)
        try:
            out.append((_unescape(key), _unescape(value), lineno))
        except ValueError as exc:
            raise ConfigError(f"{source}:{lineno}: {exc}") from None
    return out


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    """Split at the first unescaped '=', ':' or whitespace; the value keeps its escapes."""
    i, n = 0, len(line)
    while i < n and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:min(i, n)]
    rest = line[min(i, n):].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    value = rest.rstrip(" \t\f")
    if _continues(value) and len(value) < len(rest):
        value = rest[:len(value) + 1]  # an escaped trailing space stays
    return key, value


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 >= len(text):
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2:i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ValueError(f"malformed \\uxxxx escape in {text!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(c, c))
            i += 2
    return "".join(out)
