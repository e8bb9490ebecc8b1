"""Each operator kind's run-time class, by name: the one place a kind's compute is registered."""

from quail.runtime.base import KindRuntime
from quail.runtime.classify import ClassifyRuntime
from quail.runtime.extract import ExtractRuntime
from quail.runtime.filter import FilterRuntime
from quail.runtime.join import JoinRuntime
from quail.runtime.map import MapRuntime

RUNTIMES: dict[str, KindRuntime] = {r.kind.name: r for r in (FilterRuntime(), ClassifyRuntime(), JoinRuntime(),
                                                                ExtractRuntime(), MapRuntime())}


def runtime_of(kind: str) -> KindRuntime:
    return RUNTIMES[kind]
