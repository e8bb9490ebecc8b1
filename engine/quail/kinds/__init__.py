"""The operator kinds, by name: the one place a new kind is registered."""

from quail.kinds.base import OperatorKind
from quail.kinds.classify import Classify
from quail.kinds.extract import Extract
from quail.kinds.filter import Filter
from quail.kinds.join import Join
from quail.kinds.map import Map

KINDS: dict[str, OperatorKind] = {k.name: k for k in (Filter(), Classify(), Join(), Extract(), Map())}


def kind_of(name: str) -> OperatorKind:
    return KINDS[name]
