"""Each kind's settings model: one place where a setting is typed, checked and named, whichever front
end gives it (a pipeline file, the CLI, an Airflow operator)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quail.errors import QuailError
from quail.kinds import KINDS
from quail.kinds.filter import FilterSettings
from quail.kinds.settings import check_operator_name
from quail.specs import Cascade, OperatorSpec


def test_a_pipeline_mapping_and_the_same_settings_elsewhere_give_one_spec():
    body = {"input": "news", "column": "text", "predicates": "Sport?", "threshold": 1, "limit": 3,
            "cascade": {"model": "big", "band": [0.2, 0.8]}}
    spec = KINDS["filter"].from_settings("f", body, "o.parquet")
    assert spec == OperatorSpec("f", "filter", ("news",), ("text",), ("Sport?",), threshold=1.0, limit=3,
                                cascade=Cascade("big", 0.2, 0.8), output="o.parquet")
    assert FilterSettings.parse(body, "here").spec("f", "o.parquet") == spec


@pytest.mark.parametrize("kind, body, says", [
    ("filter", {"input": "t", "column": "text"}, "operator 'x': filter needs 'predicates'"),
    ("filter", {"input": "t", "column": "text", "predicates": ["q"], "colour": "red", "size": 1},
     "operator 'x': unknown filter keys ['colour', 'size']; allowed: ['calibration', 'cascade', 'column', "
     "'input', 'keep_all', 'limit', 'predicates', 'threshold']"),
    ("filter", {"input": "t", "column": "text", "predicates": ["q"], "calibration": "platt"},
     "operator 'x': 'calibration' must be one of auto, none, contextual, got 'platt'"),
    ("classify", {"input": "t", "column": "text", "labels": ["a", "b"], "question": 3},
     "operator 'x': 'question' must be text, got 3"),
    ("join", {"left": "a", "right": "b", "left_column": "t", "right_column": "u", "condition": "c", "top_k": "2"},
     "operator 'x': 'top_k' must be a whole number of rows, got '2'"),
    ("classify", ["a", "b"], "operator 'x': classify must be a mapping of its settings"),
])
def test_bad_settings_name_the_operator_and_the_key(kind, body, says):
    with pytest.raises(QuailError) as e:
        KINDS[kind].from_settings("x", body, None)
    assert str(e.value) == says


def test_one_setting_is_checked_alone_as_the_model_checks_it():
    assert FilterSettings.check_one("cascade", {"model": "m", "band": [0, 1]}, "task 't'") == Cascade("m", 0.0, 1.0)
    assert FilterSettings.check_one("cascade", None, "task 't'") is None
    with pytest.raises(QuailError, match="task 't': cascade 'band' must be two numbers"):
        FilterSettings.check_one("cascade", {"model": "m", "band": [0]}, "task 't'")


@pytest.mark.parametrize("name, says", [
    ("", "is empty"), ("  ", "is empty"), ("a\x00b", "holds the control character '\\x00'"),
    ("a\nb", "holds the control character '\\n'"), ("a\u2028b", "holds the control character '\\u2028'"),
    ("../..", "holds the path separator '/'"), ("a\\b", "holds the path separator '\\\\'"),
    (".", "is a folder's name"), ("..", "is a folder's name"), (None, "is not text"),
])
def test_operator_names_that_are_no_file_name_are_refused(name, says):
    with pytest.raises(QuailError) as e:
        check_operator_name(name)
    assert str(e.value).startswith(f"operator name {name!r} {says}: ")


@given(st.from_regex(r"[\w.-]+", fullmatch=True).filter(lambda k: k not in (".", "..")))
def test_every_airflow_task_id_but_dot_and_dot_dot_is_a_name(task_id):
    check_operator_name(task_id)  # Airflow's KEY_REGEX; TaskGroups join their ids with "."


def test_a_cascade_target_instead_of_a_band():
    got = FilterSettings.check_one("cascade", {"model": "m", "target": {"precision": 0.95}, "delta": 0.1}, "t")
    assert got == Cascade("m", metric="precision", target=0.95, delta=0.1) and not got.chosen
    for body, says in (({"model": "m", "band": [0, 1], "target": {"recall": 0.9}}, "'cascade' must be"),
                       ({"model": "m"}, "'cascade' must be"),
                       ({"model": "m", "target": {"recall": 0.9, "precision": 0.9}}, "cascade 'target' must be one"),
                       ({"model": "m", "target": {"recall": 0.9}, "sample": 1.5}, "'sample' must be a whole")):
        with pytest.raises(QuailError, match=says):
            FilterSettings.check_one("cascade", body, "t")
    spec = KINDS["filter"].from_settings("f", {"input": "t", "column": "text", "predicates": "Q?",
                                               "cascade": {"model": "m", "target": {"f1": 0.9}}}, None)
    with pytest.raises(QuailError, match="cascade target 'f1': a filter's is one of accuracy, precision, recall"):
        KINDS["filter"].validate(spec, "operator 'f'")
