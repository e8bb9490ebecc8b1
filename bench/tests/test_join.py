"""bench/e2e/join.py's calls: a join asked in calls of whole left rows answers as in one call,
each call's time and tokens kept in the ledger, and a ledger read back as written."""

import numpy as np
import pytest

from bench.e2e.join import CONDITION, Ledger, in_calls

LEFT = ["anna smith; 3 high street, leeds", "bob jones; 12 park road, york", "carla diaz; 7 mill lane, bath"]
RIGHT = ["smith anna; 3 high st, leeds", "bob jone; 12 park rd, york", "carla dias; mill lane, bath",
         "dev patel; 40 green, ely", "emma browne; church walk, hull"]


@pytest.mark.slow  # loads smollm2
def test_a_join_in_calls_answers_as_in_one_and_the_ledger_keeps_each_call(tmp_path) -> None:
    from quail.session import Session

    session = Session.open("smollm2-135m", dtype="float32", device="cpu")
    pairs = [[0, 1, 2], [3], [0, 1, 2, 3, 4]]
    whole, _ = session.join(LEFT, RIGHT, CONDITION, partner="record", pairs=pairs)
    ledger = Ledger(tmp_path / "ledger.json")
    step = in_calls(session, 4, ledger)
    step["name"] = "a step"
    parts, stats = session.join(LEFT, RIGHT, CONDITION, partner="record", pairs=pairs)
    for a, b in zip(whole.p_yes, parts.p_yes):
        np.testing.assert_allclose(a, b, atol=1e-4)
    spent = Ledger(tmp_path / "ledger.json").spent("a step")  # read back from the file
    assert spent["calls"] == 2  # rows 0 and 1 (3 pairs, then 4), then row 2
    assert spent["seconds"] > 0 and spent["tokens_computed"] == stats.tokens_computed > 0


def test_a_ledger_adds_up_its_steps(tmp_path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.add("x", 1.5, 10)
    ledger.add("x", 2.0, 5)
    ledger.add("y", 1.0, 1)
    again = Ledger(tmp_path / "ledger.json")
    assert again.spent("x") == {"seconds": 3.5, "tokens_computed": 15, "calls": 2}
    assert again.spent("y")["tokens_computed"] == 1
