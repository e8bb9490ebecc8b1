"""Each kind's settings model: one place where a setting is typed, checked and named, whichever front
end gives it (a pipeline file, the CLI, an Airflow operator)."""

import dataclasses

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
    with pytest.raises(QuailError, match="cascade target 'f1': a filter's is one of accuracy, precision, recall"):
        KINDS["filter"].from_settings("f", {"input": "t", "column": "text", "predicates": "Q?",
                                            "cascade": {"model": "m", "target": {"f1": 0.9}}}, None)


GOOD = {
    "filter": {"input": "t", "column": "text", "predicates": ["Q?", "R?"], "threshold": 0.3, "limit": 2,
               "keep_all": True, "cascade": {"model": "m", "target": {"recall": 0.9}}},
    "classify": {"input": "t", "column": "text", "labels": {"a": "the first", "b": "the second"}, "top_k": 2,
                 "calibration": "none"},
    "join": {"left": "a", "right": "b", "left_column": "t", "right_column": "u", "condition": "c",
             "right_name": "headline", "top_k": 1},
}


@pytest.mark.parametrize("kind", list(GOOD))
def test_a_spec_is_checked_by_the_model_that_built_it(kind):
    """A spec that arrives whole (a job submission) stands for the same settings, and passes."""
    settings = KINDS[kind].settings.parse(GOOD[kind], "here")
    spec = settings.spec("x", None)
    assert KINDS[kind].settings.of_spec(spec, "there").spec("x", None) == spec
    KINDS[kind].validate(spec, "there")


@pytest.mark.parametrize("kind, change, says", [
    ("filter", {"threshold": 1.5}, "threshold 1.5 is outside [0, 1]"),
    ("filter", {"limit": 0}, "limit must be a positive number of rows, on a filter"),
    ("filter", {"predicates": ["Q?", " "]}, "predicate 2 is empty"),
    ("filter", {"cascade": {"model": "m", "band": [0.9, 0.1]}}, "cascade band [0.9, 0.1] must be LOW <= HIGH"),
    ("classify", {"labels": ["a", "a"]}, "duplicate labels ['a']"),
    ("classify", {"labels": ["a", " "]}, "label 2 is empty"),
    ("classify", {"labels": ["sport", "\u200b"]}, "label 2 is empty or invisible"),
    ("classify", {"labels": ["sport", " sport"]}, "label 2 starts or ends with a space"),
    ("classify", {"labels": ["sport", "\u202etrops"]}, "label 2 holds invisible or reordering characters (U+202E)"),
    ("classify", {"labels": ["sport", "Sport"]}, "labels 'sport' and 'Sport' look alike"),
    ("classify", {"labels": ["cafe", "caf\u00e9"]}, "labels 'cafe' and 'café' look alike"),
    ("classify", {"top_k": 3}, "top_k must be between 2 and the number of labels (2), got 3"),
    ("join", {"top_k": 0}, "top_k must be at least 1, got 0"),
    ("join", {"right_name": "document"}, "right_name 'document' is what the prompt calls the left row"),
])
def test_a_file_and_a_spec_are_refused_alike(kind, change, says):
    """One set of checks: a pipeline file's settings and a job submission's spec get the same words."""
    body = {**GOOD[kind], **change}
    with pytest.raises(QuailError) as from_file:
        KINDS[kind].from_settings("x", body, None)
    assert says in str(from_file.value)
    good = KINDS[kind].settings.parse(GOOD[kind], "here").spec("x", None)
    bad = dataclasses.replace(good, **_spec_change(kind, change))
    with pytest.raises(QuailError) as from_spec:
        KINDS[kind].validate(bad, "operator 'x'")
    assert str(from_spec.value) == str(from_file.value)


def _spec_change(kind, change):
    """The spec fields a settings change stands for."""
    [(key, value)] = change.items()
    if key == "predicates":
        return {"questions": tuple(value)}
    if key == "labels":
        return {"labels": tuple(value), "descriptions": ()}
    if key == "cascade":
        return {"cascade": Cascade(value["model"], *value["band"])}
    return {key: value}


def test_a_setting_another_kind_takes_is_refused_on_a_spec():
    spec = KINDS["classify"].settings.parse(GOOD["classify"], "here").spec("x", None)
    with pytest.raises(QuailError, match=r"unknown classify keys \['keep_all', 'threshold'\]"):
        KINDS["classify"].validate(dataclasses.replace(spec, threshold=0.7, keep_all=True), "operator 'x'")
