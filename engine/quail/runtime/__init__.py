"""Each operator kind's run-time class, by name: the one place a kind's compute is registered."""

from quail.runtime.base import KindRuntime
from quail.runtime.classify import ClassifyRuntime
from quail.runtime.filter import FilterRuntime
from quail.runtime.join import JoinRuntime

RUNTIMES: dict[str, KindRuntime] = {r.kind.name: r for r in (FilterRuntime(), ClassifyRuntime(), JoinRuntime())}


def runtime_of(kind: str) -> KindRuntime:
    return RUNTIMES[kind]
