"""Each operator kind's run-time class, registered against the kinds' own registry (quail/kinds/):
a kind that has none, or a run-time class of no kind, fails here, at import."""

from quail.kinds import KINDS
from quail.runtime.base import KindRuntime
from quail.runtime.classify import ClassifyRuntime
from quail.runtime.extract import ExtractRuntime
from quail.runtime.filter import FilterRuntime
from quail.runtime.join import JoinRuntime
from quail.runtime.map import MapRuntime


def _by_kind(*runtimes: KindRuntime) -> dict[str, KindRuntime]:
    """The run-time classes by their kind's name, in the kinds' order."""
    found = {r.kind.name: r for r in runtimes}
    if set(found) != set(KINDS) or any(r.kind is not KINDS[name] for name, r in found.items()):
        raise TypeError(f"every kind needs one run-time class, of the registry's kind: the kinds are "
                        f"{sorted(KINDS)}, the run-time classes' {sorted(found)}")
    return {name: found[name] for name in KINDS}


RUNTIMES = _by_kind(FilterRuntime(), ClassifyRuntime(), JoinRuntime(), ExtractRuntime(), MapRuntime())


def runtime_of(kind: str) -> KindRuntime:
    return RUNTIMES[kind]
