"""The answers a store found lately, shared by both backends: the database is asked only for keys not
held, each once; what it gives is held only when it is a signed answer; a last use is written back
no more often than touch_every, and only once the backend recorded it."""

import time

from quail.store.recent import Recent
from quail.store.signing import Signer
from quail.store.values import sealed

SIGNED_BY = Signer(b"the secret of this worker")


class Table:
    """A backend's rows, with what it was asked."""

    def __init__(self, answers: dict[bytes, list], used: object = 0) -> None:
        self.rows = {k: (sealed(SIGNED_BY, k, v), used) for k, v in answers.items()}
        self.asked: list[list[bytes]] = []
        self.touched: list[list[bytes]] = []
        self.writes = True

    def read(self, keys: list[bytes]) -> list[tuple[bytes, object, object]]:
        self.asked.append(keys)
        return [(k, *self.rows[k]) for k in keys if k in self.rows]

    def touch(self, keys: list[bytes], now: int) -> bool:
        self.touched.append(keys)
        return self.writes


def test_only_keys_not_held_are_read_each_once():
    table = Table({b"a": [0.25], b"b": [0.5]})
    recent = Recent()
    found, seen = recent.get([b"a", b"c", b"a"], 1, SIGNED_BY, table.read, table.touch)
    assert found == {b"a": [0.25]} and table.asked == [[b"a", b"c"]]  # a key not found is not held
    found, _ = recent.get([b"a", b"b", b"c"], 1, SIGNED_BY, table.read, table.touch)
    assert found == {b"a": [0.25], b"b": [0.5]} and table.asked[1:] == [[b"b", b"c"]]
    assert recent.get([b"a"], 1, SIGNED_BY, table.read)[0] == {b"a": [0.25]} and len(table.asked) == 2
    assert (seen.unsigned, seen.damaged) == (0, 0)


def test_an_answer_of_another_width_is_not_found():
    table = Table({b"a": [0.25, 0.75]})
    recent = Recent()
    assert recent.get([b"a"], 1, SIGNED_BY, table.read)[0] == {}
    assert recent.get([b"a"], 2, SIGNED_BY, table.read)[0] == {b"a": [0.25, 0.75]}


def test_a_value_that_is_not_a_signed_answer_is_counted_and_not_held():
    table = Table({b"a": [0.25], b"b": [0.5], b"c": [0.75]})
    table.rows[b"a"] = (sealed(Signer(b"another worker's secret"), b"a", [0.25]), 0)
    table.rows[b"b"] = (sealed(SIGNED_BY, b"b", [1.5]), 0)
    recent = Recent()
    found, seen = recent.get([b"a", b"b", b"c"], 1, SIGNED_BY, table.read)
    assert found == {b"c": [0.75]} and (seen.unsigned, seen.damaged) == (1, 1)
    recent.get([b"a", b"b"], 1, SIGNED_BY, table.read)
    assert table.asked[-1] == [b"a", b"b"]  # asked again: never held


def test_a_last_use_is_written_back_in_key_order_no_more_often_than_touch_every():
    table = Table({b"b": [0.5], b"a": [0.25]}, used=time.time_ns())
    recent = Recent(touch_every=3600)
    recent.get([b"b", b"a"], 1, SIGNED_BY, table.read, table.touch)
    assert table.touched == []  # used just now
    table = Table({b"b": [0.5], b"a": [0.25]}, used=0)
    recent = Recent(touch_every=3600)
    recent.get([b"b", b"a"], 1, SIGNED_BY, table.read, table.touch)
    assert table.touched == [[b"a", b"b"]]  # key order: overlapping writers never deadlock
    recent.get([b"b", b"a"], 1, SIGNED_BY, table.read, table.touch)
    assert len(table.touched) == 1  # held as used now


def test_a_use_the_backend_did_not_record_is_tried_again_and_none_is_asked_without_touch():
    table = Table({b"a": [0.25]}, used=0)
    table.writes = False
    recent = Recent(touch_every=3600)
    recent.get([b"a"], 1, SIGNED_BY, table.read, table.touch)
    recent.get([b"a"], 1, SIGNED_BY, table.read, table.touch)
    assert table.touched == [[b"a"], [b"a"]]
    recent.get([b"a"], 1, SIGNED_BY, table.read, None)
    assert len(table.touched) == 2


def test_a_last_use_that_is_no_time_counts_as_none():
    for used in ("abc", None, 1.5, b"\x01"):
        table = Table({b"a": [0.25]}, used=used)
        Recent(touch_every=3600).get([b"a"], 1, SIGNED_BY, table.read, table.touch)
        assert table.touched == [[b"a"]], used


def test_answers_stored_are_held_and_what_passes_the_limit_is_forgotten(monkeypatch):
    monkeypatch.setattr("quail.store.recent.RECENT", 3)
    table = Table({})
    recent = Recent()
    recent.put([(b"a", [0.25]), (b"b", (0.5,))], time.time_ns())
    assert recent.get([b"a", b"b"], 1, SIGNED_BY, table.read)[0] == {b"a": [0.25], b"b": [0.5]}
    assert table.asked == [] and len(recent) == 2
    recent.put([(k, [0.5]) for k in (b"c", b"d")], time.time_ns())
    assert len(recent) == 4
    assert recent.get([b"a"], 1, SIGNED_BY, table.read)[0] == {}  # past RECENT: all forgotten, then looked up
    assert table.asked == [[b"a"]] and len(recent) == 0
    recent.put([(b"a", [0.25])], time.time_ns())
    recent.clear()
    assert len(recent) == 0
