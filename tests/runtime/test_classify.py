"""runtime/classify.py: a window's classify results placed beside its input rows: the best label, each
label's probability, a cascade's `escalated`, and the K best labels, without a model."""

import dataclasses

import pyarrow as pa
import pytest

from quail.errors import QuailError
from quail.runtime.classify import ClassifyRuntime
from quail.specs import Cascade, OperatorSpec

RUN = ClassifyRuntime()
SPEC = OperatorSpec("c", "classify", ("t",), ("text",), ("Topic?",), ("sport", "politics", "tech"))
TABLE = pa.table({"text": ["a", "b", "c", "d"]})
PROBS = {0: (0.7, 0.2, 0.1), 1: (0.1, 0.3, 0.6), 3: (0.2, 0.4, 0.4)}  # row 2 was never asked


def _results(offset: int = 0, escalated: list[bool] | None = None) -> pa.Table:
    labels = [SPEC.labels[max(range(3), key=lambda i: p[i])] for p in PROBS.values()]
    columns = {"row": pa.array([r + offset for r in PROBS], pa.int64()), "label": pa.array(labels, pa.string())}
    for k, label in enumerate(SPEC.labels):
        columns[f"p_{label}"] = pa.array([p[k] for p in PROBS.values()], pa.float64())
    if escalated is not None:
        columns["escalated"] = pa.array(escalated, pa.bool_())
    return pa.table(columns)


def test_a_classify_puts_the_label_and_each_labels_probability_beside_its_input_rows():
    out = RUN.shape(SPEC, _results(), [TABLE], "t")
    assert out.column_names == ["text", "label", "p_sport", "p_politics", "p_tech"]
    assert out.column("text").to_pylist() == ["a", "b", "c", "d"]
    assert out.column("label").to_pylist() == ["sport", "tech", None, "politics"]
    assert out.column("p_politics").to_pylist() == [0.2, 0.3, None, 0.4]


def test_the_escalated_column_comes_only_with_a_cascade():
    spec = dataclasses.replace(SPEC, cascade=Cascade("larger", low=0.3, high=0.8))
    out = RUN.shape(spec, _results(escalated=[False, True, False]), [TABLE], "t")
    assert out.column_names[-1] == "escalated"
    assert out.column("escalated").to_pylist() == [False, True, None, False]
    assert "escalated" not in RUN.shape(SPEC, _results(escalated=[False, True, False]), [TABLE], "t").column_names


def test_top_k_2_adds_the_best_labels_probability_and_the_second_label_with_its_own():
    out = RUN.shape(dataclasses.replace(SPEC, top_k=2), _results(), [TABLE], "t")
    assert out.column_names[-3:] == ["p_label", "label_2", "p_label_2"]
    assert out.column("p_label").to_pylist() == [0.7, 0.6, None, 0.4]
    assert out.column("label_2").to_pylist() == ["politics", "politics", None, "tech"]
    assert out.column("p_label_2").to_pylist() == [0.2, 0.3, None, 0.4]


def test_top_k_orders_the_labels_by_probability_and_ties_in_label_order():
    out = RUN.shape(dataclasses.replace(SPEC, top_k=3), _results(), [TABLE], "t")
    assert out.column_names[-5:] == ["p_label", "label_2", "p_label_2", "label_3", "p_label_3"]
    assert list(zip(out.column("label").to_pylist(), out.column("label_2").to_pylist(),
                    out.column("label_3").to_pylist())) == [("sport", "politics", "tech"),
                                                            ("tech", "politics", "sport"), (None, None, None),
                                                            ("politics", "tech", "sport")]
    assert out.column("p_label_3").to_pylist() == [0.1, 0.1, None, 0.2]


def test_top_k_1_adds_no_columns():
    assert RUN.shape(dataclasses.replace(SPEC, top_k=1), _results(), [TABLE], "t").column_names \
        == ["text", "label", "p_sport", "p_politics", "p_tech"]


def test_an_input_that_already_has_a_label_column_by_any_case_is_refused():
    table = TABLE.append_column("Label", pa.array(["w", "x", "y", "z"]))
    with pytest.raises(QuailError, match=r"^news\.parquet: already has the column\(s\) \['label'\]"):
        RUN.shape(SPEC, _results(), [table], "news.parquet")


def test_every_answered_row_is_output_counted_and_no_selectivity_observed():
    assert RUN.output_rows(SPEC, _results()) == [0, 1, 3]
    assert RUN.counted_rows(_results()) == 3
    assert RUN.observed(SPEC, _results()) is None


def test_in_window_shifts_the_row_column_by_the_windows_offset():
    window = RUN.in_window(_results(offset=40), 40)
    assert window.column("row").to_pylist() == [0, 1, 3]
    assert window.column_names == _results().column_names
    assert RUN.shape(SPEC, window, [TABLE], "t").column("label").to_pylist() == ["sport", "tech", None, "politics"]
