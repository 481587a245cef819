"""Compatibility levels as Confluent's registry applies them, over any format's reader/writer check."""
from __future__ import annotations

from typing import Sequence

from pybroker.schemas import ParsedSchema

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"


def incompatibilities(level: str, new: ParsedSchema, previous: Sequence[ParsedSchema]) -> list[str]:
    """Why ``new`` may not follow ``previous`` (a subject's live versions, oldest first) under ``level``."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    errors = []
    for old in reversed(against):  # newest first, as Confluent reports them
        if base in ("BACKWARD", "FULL"):  # the new schema reads what the old one wrote
            errors += [f"{e} (reading data written with an earlier schema)" for e in new.compatibility_errors(old)]
        if base in ("FORWARD", "FULL"):  # the old schema reads what the new one writes
            errors += [f"{e} (an earlier schema reading new data)" for e in old.compatibility_errors(new)]
    return errors
