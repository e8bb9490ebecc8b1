"""The session's use of the answer store: its keys name its model's identity, and a run that does
not use the store gets none (the kinds' keys themselves: tests/kinds/test_keys.py)."""

from types import SimpleNamespace

from quail.reuse import Retain, Reuse
from quail.session import Session
from quail.store import answer_key


def _session(store=None):
    s = Session.__new__(Session)
    s.loaded = SimpleNamespace(identity="model", name="x")
    s.engine = object()
    s.store = store
    return s


def test_the_store_is_keyed_by_the_model_and_used_as_reuse_says():
    store = object()
    run = _session(store)._run(True, True, None)
    assert run.stored.store is store and run.stored.key("asked", [1, 2]) == answer_key("model", "asked", [1, 2])
    assert run.reuse == Reuse() and run.retain == Retain()
    assert _session(store)._run(Reuse(store=False), None, None).stored is None
    assert _session(store)._run(False, None, None).reuse == Reuse.none()
    assert _session()._run(True, None, None).stored is None
