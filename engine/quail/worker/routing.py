"""Which worker a task's job goes to, when a connection lists several.

A task is routed by its DAG and its partition (an Airflow task's map index; none for a task that is
not mapped), never by its run, so that tomorrow's run of a partition lands where today's ran while
the pool is unchanged, and a chain's consumer lands with its producer of the same partition (the KV
it retains is there). Each key has a rendezvous (highest-random-weight) order over the workers,
so adding or removing a worker moves about 1/N of the keys. One DAG's partitions are spread: the
partitions 0..p of a DAG hold at most ceil((p + 1) / N) of them per worker, each taking the first
worker in its own order that has room, so a mapped operator's partitions use the whole pool.

A home whose queue is far above the least loaded worker's, on both an absolute and a relative
threshold (as SGLang's router balances), spills the task to the least loaded; a home that does
not answer fails over to the next worker in the key's order. Pure: the loads come in as numbers."""

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

Routed = Literal["home", "spilled", "failover"]
DIRECT: Final = "direct"  # no route chosen: the task's connection names one worker (or none: a local one)
ROUTES: Final = (*get_args(Routed), DIRECT)  # how a task came to its worker, as its manifest and metrics say

SPILL_ABSOLUTE_TOKENS = 200_000  # queued tokens above the least loaded worker's...
SPILL_RELATIVE = 4.0  # ...and this many times them


@dataclass(frozen=True)
class Route:
    worker: str  # where the task goes
    home: str  # the key's choice among the workers that answer
    order: tuple[str, ...]  # every worker, in the key's order (the failover order)
    why: str = ""  # what a task's log and manifest say of the choice

    @property
    def spilled(self) -> bool:
        return self.worker != self.home

    @property
    def routed(self) -> Routed:
        """How the task came to its worker: its home, spilled off a far busier home, or failed over
        from a first choice that did not answer."""
        return "spilled" if self.spilled else "home" if self.worker == self.order[0] else "failover"


def hash_order(workers: Sequence[str], key: str) -> tuple[str, ...]:
    """The workers by their weight for this key, highest first."""
    def weight(w: str) -> bytes:
        return hashlib.sha256(f"{key}\x1f{w}".encode()).digest()

    return tuple(sorted(dict.fromkeys(workers), key=weight, reverse=True))


def placement(workers: Sequence[str], dag: str, partition: int | None) -> tuple[str, ...]:
    """The order in which a DAG's partition tries the workers: its home first, then the rest of its
    hash order. None: a task that is not mapped, whose home is its DAG's own rendezvous choice."""
    if partition is None or partition < 0:
        return hash_order(workers, dag)
    return _spread(tuple(sorted(set(workers))), dag, partition)


@functools.lru_cache(maxsize=4096)
def _spread(workers: tuple[str, ...], dag: str, partition: int) -> tuple[str, ...]:
    held = dict.fromkeys(workers, 0)
    for q in range(partition + 1):
        order = hash_order(workers, f"{dag}\x1f{q}")
        room = -(-(q + 1) // len(workers))  # ceil((q + 1) / N)
        home = next(w for w in order if held[w] < room)
        held[home] += 1
    return (home, *(w for w in order if w != home))


def route(order: Sequence[str], loads: Mapping[str, int], absolute: int = SPILL_ABSOLUTE_TOKENS,
          relative: float = SPILL_RELATIVE) -> Route | None:
    """`order`: the key's placement; `loads`: queued tokens of the workers that answered (the others
    are passed over); None if none answered."""
    alive = [w for w in order if w in loads]
    if not alive:
        return None
    home = alive[0]
    least = min(alive, key=lambda w: loads[w])  # ties to the earlier in the key's order
    far = loads[home] - loads[least] > absolute and loads[home] > relative * loads[least]
    if far:
        why = (f"its home {home} held {loads[home]:,} queued tokens, far more than {least}'s {loads[least]:,}: "
               f"it spilled there and lost the KV its producer retained")
    elif home != order[0]:
        silent = ", ".join(order[: order.index(home)])
        why = f"{silent} did not answer: it failed over to {home}, the next in its partition's order"
    else:
        why = "its partition's home"
    return Route(least if far else home, home, tuple(order), why)
