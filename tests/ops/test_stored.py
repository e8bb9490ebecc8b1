"""The one wrapper around every kind's op (ops/stored.py): it looks the rows' answers up, runs the op
with them as known, and stores the new ones, each kind's as its `Answers` says."""

from quail.executor.stats import Stats
from quail.ops.classify import ClassifyAnswers, ClassifyResult
from quail.ops.filter import FilterAnswers, FilterResult
from quail.ops.generate import GenerateResult, Written, WrittenAnswers
from quail.ops.join import JoinAnswers, JoinResult
from quail.ops.stored import Stored, with_answers
from quail.store import WRITTEN


class DictStore:
    def __init__(self, held=None):
        self.held, self.asked = dict(held or {}), []

    def get(self, keys, width, touch=True):
        self.asked.append((list(keys), width, touch))
        return {k: self.held[k] for k in keys if k in self.held}

    def put(self, items):
        self.held.update(items)


def _keys(key):
    return [[b"a1", b"a2"], [b"b1", b"b2"], [b"c1", b"c2"]]


def test_without_a_store_or_a_key_every_row_is_computed():
    seen = []

    def run(known):
        seen.append(known)
        return FilterResult(), Stats()

    with_answers(None, _keys, FilterAnswers(), run)
    store = DictStore()
    with_answers(Stored(store, "m"), lambda key: [[], []], JoinAnswers(), run)  # a join with no right rows
    assert seen == [None, None] and store.asked == []


def test_a_filter_finds_what_is_stored_and_stores_the_rest_but_its_stored_rows():
    store = DictStore({b"a1": [0.9], b"b2": [0.2]})

    def run(known):
        assert known == [[0.9, None], [None, 0.2], [None, None]]
        return FilterResult([[0.9, 0.8], [0.1, None], [0.3, 0.4]], [True, False, False],
                            [[0.9, 0.8], [0.1, None], [0.3, 0.4]], {0}), Stats()

    with_answers(Stored(store, "m"), _keys, FilterAnswers(), run)
    assert store.asked == [([b"a1", b"a2", b"b1", b"b2", b"c1", b"c2"], 1, True)]
    assert store.held == {b"a1": [0.9], b"b2": [0.2], b"b1": [0.1], b"c1": [0.3], b"c2": [0.4]}


def test_a_classify_and_a_join_keep_their_answers_by_their_own_widths():
    store = DictStore({b"x": [0.25, 0.75]})
    rows = lambda key: [[b"x"], [b"y"]]  # noqa: E731

    def labelled(known):
        assert known == [[0.25, 0.75], None]
        return ClassifyResult([[0.25, 0.75], [0.6, 0.4]], [1, 0], {0}), Stats()

    with_answers(Stored(store, "m"), rows, ClassifyAnswers(2), labelled)
    assert store.held[b"y"] == [0.6, 0.4] and store.asked[-1][1] == 2

    def paired(known):
        return JoinResult([[0.5, 0.7], [0.1, 0.2]]), Stats()

    with_answers(Stored(store, "m"), lambda key: [[b"p", b"q"], [b"r", b"s"]], JoinAnswers(), paired)
    assert [store.held[k] for k in (b"p", b"q", b"r", b"s")] == [[0.5], [0.7], [0.1], [0.2]]


def test_a_written_output_that_does_not_read_back_is_neither_found_nor_stored():
    readable = lambda w: w.tokens != (7,)  # noqa: E731
    store = DictStore({b"a": [0.0, 5.0, 6.0], b"b": [0.0, 7.0], b"c": [1.0, 99.0]})  # 99: past the vocabulary

    def run(known):
        assert known == [Written((5, 6), False), None, None, None]
        return GenerateResult([Written((5, 6), False), Written((8,), True), Written((7,), False),
                               Written((9,), False)], {0}), Stats()

    with_answers(Stored(store, "m"), lambda key: [[b"a"], [b"b"], [b"c"], [b"d"]], WrittenAnswers(50, readable), run)
    assert store.asked[0][1] == WRITTEN
    assert store.held[b"b"] == [1.0, 8.0] and store.held[b"c"] == [1.0, 99.0] and store.held[b"d"] == [0.0, 9.0]
