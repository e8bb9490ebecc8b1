"""One operator's window computed as a worker computes it: a question that leaves documents no room
in the model's context is refused before the window is computed."""

import pytest

from quail.errors import QuailError
from quail.executor.engine import PhysicalSettings
from quail.planner.plan import plan
from quail.reuse import Reuse
from quail.runtime.compute import compute
from quail.session import Session
from quail.specs import OperatorSpec


def test_a_predicate_longer_than_the_context_is_refused_before_the_window_is_computed(smollm2, monkeypatch):
    session = Session(smollm2, PhysicalSettings(arena_pages=64, max_batch_tokens=512))
    monkeypatch.setattr(session.engine, "run", lambda *a, **k: pytest.fail("computed"))
    spec = OperatorSpec("sport", "filter", ("news",), ("text",), ("word " * 8300,))
    with pytest.raises(QuailError, match=r"operator 'sport': predicate is 8,3\d\d tokens with its prompt, which "
                                         r"leaves 0 of the model's 8,192-token context"):
        compute(session, spec, plan([spec])["sport"], Reuse(), [(["The striker scored."], [0])], truncate=True)
