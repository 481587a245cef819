"""Subscription regexes of consumer groups (KIP-848 SubscribedTopicRegex), in RE2 syntax as Kafka's RE2/J.

RE2 matches in time linear in the topic name, so no pattern can stall the event loop the way a
backtracking engine does on ``(a+)+``; what RE2 cannot guarantee that for (lookaround,
backreferences) it refuses, and so do we: INVALID_REGULAR_EXPRESSION with Kafka's message. A
pattern must match the whole topic name (Java's ``Matcher.matches``). ``TopicRegexes`` keeps the
matches of every pattern seen against the current topic names and matches again only when the
names change (or a pattern is new), never per heartbeat.
"""
import functools

MAX_REGEX_LENGTH = 4096  # characters: ample for alternations of topic names, bounds the compile work
MAX_REGEX_MEMORY = 8 << 20  # bytes RE2 may spend on one pattern (or one set of patterns)
MAX_CACHED_PATTERNS = 10_000  # patterns whose matches are kept between topic changes


@functools.cache
def _re2():
    """RE2 and our options, loaded on the first pattern: a broker whose groups use no regex never maps it."""
    import re2
    options = re2.Options()
    options.log_errors = False  # a bad pattern is the client's error, answered to it: keep stderr quiet
    options.never_capture = True  # matches only: no submatch bookkeeping
    options.max_mem = MAX_REGEX_MEMORY
    return re2, options


@functools.lru_cache(maxsize=1024)
def why_invalid(pattern: str) -> str | None:
    """Why RE2 (with our limits) refuses ``pattern``, or None when it compiles."""
    if len(pattern) > MAX_REGEX_LENGTH:
        return f"longer than {MAX_REGEX_LENGTH} characters"
    re2, options = _re2()
    try:
        re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    return None


def invalid_message(pattern: str) -> str | None:
    """Kafka's INVALID_REGULAR_EXPRESSION message for ``pattern``, or None when it is valid."""
    reason = why_invalid(pattern)
    if reason is None:
        return None
    return f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}."


def full_matches(patterns, names) -> dict[str, frozenset]:
    """pattern -> the names it matches whole; one pass over the names for all patterns (an RE2 set).
    Invalid patterns (refused before they get here) match nothing."""
    valid = [p for p in dict.fromkeys(patterns) if why_invalid(p) is None]
    found: dict[str, set] = {p: set() for p in patterns}
    if not valid or not names:
        return {p: frozenset(s) for p, s in found.items()}
    re2, options = _re2()
    matcher = re2.Set.FullMatchSet(options)
    for p in valid:
        matcher.Add(p)
    matcher.Compile()
    for name in names:
        for i in matcher.Match(name) or ():
            found[valid[i]].add(name)
    return {p: frozenset(s) for p, s in found.items()}


class TopicRegexes:
    """The matches of subscription patterns against the current topic names, computed once per set of
    names: ``update`` hands in the names, ``matches`` answers (matching only the patterns not seen
    since the names last changed)."""

    def __init__(self):
        self.names: frozenset = frozenset()
        self.version = 0  # moves when the names change
        self._matches: dict[str, frozenset] = {}

    def update(self, names) -> bool:
        """Take the current topic names; True when they differ from the last ones."""
        names = frozenset(names)
        if names == self.names:
            return False
        self.names, self.version = names, self.version + 1
        self._matches.clear()
        return True

    def matches(self, patterns) -> dict[str, frozenset]:
        """pattern -> the topic names it matches whole."""
        new = [p for p in patterns if p not in self._matches]
        if new:
            if len(self._matches) + len(new) > MAX_CACHED_PATTERNS:
                self._matches.clear()  # bounded memory: patterns still in use are matched again below
                new = list(patterns)
            self._matches.update(full_matches(new, self.names))
        return {p: self._matches[p] for p in patterns}
