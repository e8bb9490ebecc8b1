
import pytest

from quail.errors import QuailError
from quail.planner.plan import plan
from quail.planner.retention import PRIOR
from quail.specs import OperatorSpec


def _pipeline():
    return [
        OperatorSpec("good", "filter", ("reviews",), ("text",), ("Is it positive?", "Is it detailed?")),
        OperatorSpec("topics", "classify", ("good",), ("text",), ("Topic?",), ("a", "b", "c")),
        OperatorSpec("match_b", "join", ("topics", "products"), ("text", "desc"), ("Same product?",)),
        OperatorSpec("match_c", "join", ("topics", "stores"), ("text", "name"), ("Sold there?",)),
    ]


def test_the_four_operator_pipeline():
    p = plan(_pipeline())
    assert [o.rewind for o in p.operators] == [True, True, True, True]
    assert p["good"].retain.consumers == ("topics", "match_b", "match_c")
    assert p["good"].retain.passed == 1.0 and p["good"].retain.failed == 0.0  # only passing rows go on
    assert p["topics"].retain.consumers == ("match_b", "match_c")
    assert p["match_b"].retain.consumers == ("match_c",)
    assert p["match_c"].retain is None  # the last consumer releases
    assert p["good"].selectivity == PRIOR


def test_a_filter_between_sets_the_probability_and_failing_rows_are_kept_for_readers_of_its_input():
    specs = [
        OperatorSpec("topics", "classify", ("reviews",), ("text",), ("Topic?",), ("a", "b")),
        OperatorSpec("good", "filter", ("reviews",), ("text",), ("Positive?",)),
        OperatorSpec("pairs", "join", ("good", "products"), ("text", "desc"), ("Same?",)),
        OperatorSpec("again", "classify", ("reviews",), ("text",), ("Tone?",), ("x", "y")),
    ]
    observed = {specs[1].fingerprint(): 0.2}
    p = plan(specs, observed)
    assert p["topics"].retain.consumers == ("good", "pairs", "again")
    assert p["topics"].retain.passed == 1.0
    assert p["good"].retain.passed == 1.0 and p["good"].retain.failed == 1.0  # "again" reads every row
    assert p["good"].selectivity == 0.2
    only_join = plan(specs[:3], observed)
    assert only_join["topics"].retain.passed == 1.0  # "good" reads them all
    assert only_join["good"].retain.failed == 0.0
    # a different column is a different rendering: nothing to share
    other = [specs[0], OperatorSpec("t2", "classify", ("reviews",), ("title",), ("Topic?",), ("a", "b"))]
    assert plan(other)["topics"].retain is None


def test_plan_is_deterministic_with_a_stable_hash():
    a, b = plan(_pipeline()), plan(list(_pipeline()))
    assert a == b and a.hash == b.hash and len(a.hash) == 16
    assert plan(_pipeline(), rewind=False).hash != a.hash
    assert plan(_pipeline(), {_pipeline()[0].fingerprint(): 0.3}).hash != a.hash


def test_limit_and_switches():
    specs = [OperatorSpec("f", "filter", ("t",), ("text",), ("Q?",), limit=5)]
    assert plan(specs)["f"].sharing is False
    assert plan(specs)["f"].rewind is False  # one question, nothing retained: nothing to rewind
    assert plan(_pipeline(), sharing=False)["topics"].sharing is False
    assert plan(_pipeline(), retention_on=False)["good"].retain is None


def chain_of_operators(n: int) -> list[OperatorSpec]:
    """n operators, each reading the one before: filters, classifies and joins in turn."""
    specs = [OperatorSpec("f0", "filter", ("t",), ("text",), ("Q?",))]
    for i in range(1, n):
        kind = ("filter", "classify", "join")[i % 3]
        specs.append(OperatorSpec(f"op{i}", kind, (specs[-1].name,) + (("u",) if kind == "join" else ()),
                                  ("text",) + (("x",) if kind == "join" else ()), ("Q?",),
                                  ("a", "b") if kind == "classify" else ()))
    return specs


def test_planning_100_operators_is_complete_and_deterministic():
    """(Its time is measured by `python -m bench micro planning`, not asserted here.)"""
    specs = chain_of_operators(100)
    p = plan(specs)
    assert len(p.operators) == 100 and p.hash == plan(specs).hash


@pytest.mark.parametrize("bad, message", [
    (OperatorSpec("x", "sort", ("t",), ("text",), ("Q?",)), "kind 'sort'"),
    (OperatorSpec("x", "join", ("t",), ("text",), ("Q?",)), "takes 2 input"),
    (OperatorSpec("x", "filter", ("t",), ("text",), (" ",)), "non-empty predicate"),
    (OperatorSpec("x", "classify", ("t",), ("text",), ("Q?",), ("a", "a")), "two distinct labels"),
    (OperatorSpec("x", "filter", ("t",), ("text",), ("Q?",), threshold=2.0), "threshold 2.0"),
    (OperatorSpec("x", "filter", ("y",), ("text",), ("Q?",)), "runs later"),
    (OperatorSpec("../..", "filter", ("t",), ("text",), ("Q?",)), "operator name '../..' holds the path separator"),
    (OperatorSpec("a\x00", "filter", ("t",), ("text",), ("Q?",)), "operator name 'a\\\\x00' holds the control"),
    (OperatorSpec("..", "filter", ("t",), ("text",), ("Q?",)), "operator name '..' is a folder's name"),
])
def test_bad_specs_name_the_operator(bad, message):
    later = OperatorSpec("y", "filter", ("t",), ("text",), ("Q?",))
    with pytest.raises(QuailError, match=message):
        plan([bad, later])
