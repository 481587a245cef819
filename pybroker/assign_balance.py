"""The balancing pass shared by the sticky assignors of both layers: the broker's ``uniform`` (KIP-848,
coordinator/assignors_server.py) and the client's ``cooperative-sticky`` (client/assignors.py).

Pure and layer-free so that broker and client use one copy without importing each other.
"""


def balance(owned: dict, eligible, rank, give_first) -> None:
    """Move partitions from fuller to emptier members until no move narrows a gap of two or more.

    ``owned``: member -> set of partitions, changed in place; ``eligible(partition)``: the members that
    may hold it; ``rank(member)``: the tie-break between members; ``give_first(donor, partition)``: the
    order in which a donor offers its partitions (stickiness: what it held before goes last).
    """
    total = sum(len(parts) for parts in owned.values())
    for _ in range(total * max(1, len(owned))):  # each move lowers the sum of squared counts: bounded
        if not _move_one(owned, eligible, rank, give_first):
            return


def _move_one(owned: dict, eligible, rank, give_first) -> bool:
    for donor in sorted(owned, key=lambda m: (-len(owned[m]), rank(m))):
        for part in sorted(owned[donor], key=lambda p: give_first(donor, p)):
            takers = [m for m in eligible(part) if len(owned[m]) + 1 < len(owned[donor])]
            if takers:
                taker = min(takers, key=lambda m: (len(owned[m]), rank(m)))
                owned[donor].discard(part)
                owned[taker].add(part)
                return True
    return False
