"""Which worker a task's job goes to, when a connection lists several.

Every task of a DAG run goes to the run's home worker, chosen by rendezvous (highest-random-weight)
hashing on the run, so that KV one task retains is there for the next, and adding a worker moves
only about 1/N of the runs. A home whose queue is far above the least loaded worker's, on both an
absolute and a relative threshold (as SGLang's router balances), spills the task to the least
loaded; a home that does not answer fails over to the next worker in the run's hash order. Pure:
the loads come in as numbers."""

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SPILL_ABSOLUTE_TOKENS = 200_000  # queued tokens above the least loaded worker's...
SPILL_RELATIVE = 4.0  # ...and this many times them


@dataclass(frozen=True)
class Route:
    worker: str  # where the task goes
    home: str  # the run's rendezvous choice among the workers that answer
    order: tuple[str, ...]  # every worker, in the run's hash order (the failover order)

    @property
    def spilled(self) -> bool:
        return self.worker != self.home


def hash_order(workers: Sequence[str], run: str) -> tuple[str, ...]:
    """The workers by their weight for this run, highest first."""
    def weight(w: str) -> bytes:
        return hashlib.sha256(f"{run}\x1f{w}".encode()).digest()

    return tuple(sorted(dict.fromkeys(workers), key=weight, reverse=True))


def route(workers: Sequence[str], run: str, loads: Mapping[str, int],
          absolute: int = SPILL_ABSOLUTE_TOKENS, relative: float = SPILL_RELATIVE) -> Route | None:
    """`loads`: queued tokens of the workers that answered (the others are passed over); None if
    none answered."""
    order = hash_order(workers, run)
    alive = [w for w in order if w in loads]
    if not alive:
        return None
    home = alive[0]
    least = min(alive, key=lambda w: loads[w])  # ties to the earlier in hash order
    far = loads[home] - loads[least] > absolute and loads[home] > relative * loads[least]
    return Route(least if far else home, home, order)
