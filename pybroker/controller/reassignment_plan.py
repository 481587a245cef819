"""What a partition reassignment is (target and original replicas) and which targets are refused;
no ZooKeeper here, so a single node answers the same API from it."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Reassignment:
    target: tuple    # TRS
    original: tuple  # ORS

    @property
    def replicas(self) -> tuple:
        return tuple(dict.fromkeys(self.target + self.original))

    @property
    def adding(self) -> tuple:
        return tuple(r for r in self.target if r not in self.original)

    @property
    def removing(self) -> tuple:
        return tuple(r for r in self.original if r not in self.target)


def from_znode(replicas, adding, removing) -> Reassignment | None:
    """The reassignment a topic znode records for one partition (None when it records none)."""
    if not adding and not removing:
        return None
    target = tuple(r for r in replicas if r not in removing)
    original = tuple(r for r in replicas if r not in adding)
    return Reassignment(target, original)


def check_target(target, live) -> str | None:
    """Why a target replica list is refused (INVALID_REPLICA_ASSIGNMENT), or None."""
    if not target:
        return "the replica list is empty"
    if len(set(target)) != len(target):
        return f"the replica list {list(target)} has duplicates"
    dead = [b for b in target if b not in live]
    if dead:
        return f"replica assignment has brokers that are not alive: {dead}"
    return None
