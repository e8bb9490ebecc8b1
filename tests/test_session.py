"""The session's answer-store keys."""

from types import SimpleNamespace

from quail.session import Session
from quail.store import answer_key


def _session():
    s = Session.__new__(Session)
    s.loaded = SimpleNamespace(identity="model")
    return s


def test_classify_answers_stored_before_labels_that_begin_others_were_scored_so_are_not_found():
    docs, q = [[1, 2, 3]], [9, 10]

    def before(labels):  # the key under which such answers were stored
        return answer_key("model", f"classify\x1fnone\x1f{q}\x1f{labels}", docs[0])

    apart = [[20], [21, 22]]
    assert _session().classify_keys(q, apart, docs, "none") == [before(apart)]
    nested = [[20], [20, 21]]
    assert _session().classify_keys(q, nested, docs, "none") != [before(nested)]
