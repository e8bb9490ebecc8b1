"""runtime/join.py through `quail join`: the condition before each right row answers as computing
every prompt from scratch does, costs fewer tokens a pair, and keeps its stored answers apart
from the other layout's."""

import pytest

from tests.runtime.conftest import LEFT, RIGHT, join

pytestmark = [pytest.mark.model, pytest.mark.usefixtures("smollm2_for_every_session")]


def _p(t):
    return dict(zip(zip(t.column("left_person").to_pylist(), t.column("right_person").to_pylist()),
                    t.column("p_yes").to_pylist()))


def test_the_condition_first_answers_as_from_scratch_and_keeps_its_own_stored_answers(tmp_path, tables):
    first, s_first = join(tmp_path, tables, "first", "--threshold", "0")  # the default
    scratch, _ = join(tmp_path, tables, "scratch", "--condition-first", "--threshold", "0", "--no-reuse",
                      "--no-answer-store")
    assert first.num_rows == scratch.num_rows == len(LEFT) * len(RIGHT)
    for pair, p in _p(first).items():
        assert p == pytest.approx(_p(scratch)[pair], abs=1e-4)
    _, s_last = join(tmp_path, tables, "last", "--no-condition-first", "--threshold", "0")
    assert s_last["tokens_reused"]["store"] == 0  # the other layout's answers are not this one's
    assert s_first["tokens_computed"] < s_last["tokens_computed"]  # a pair costs its right row and the cue
    again, s_again = join(tmp_path, tables, "again", "--threshold", "0")
    assert s_again["tokens_computed"] == 0 and _p(again) == _p(first)
