"""The operator kinds, by name: the one place a new kind is registered."""

from quail.kinds.base import OperatorKind
from quail.kinds.classify import Classify
from quail.kinds.filter import Filter
from quail.kinds.join import Join

KINDS: dict[str, OperatorKind] = {k.name: k for k in (Filter(), Classify(), Join())}


def kind_of(name: str) -> OperatorKind:
    return KINDS[name]
