"""runtime/filter.py: a window's filter results shaped into its output rows, and what they count
toward a row limit and the selectivities, without a model."""

import dataclasses

import pyarrow as pa
import pytest

from quail.errors import QuailError
from quail.runtime.filter import FilterRuntime
from quail.specs import OperatorSpec

RUN = FilterRuntime()
SPEC = OperatorSpec("f", "filter", ("t",), ("text",), ("Sport?", "Long?"))
TABLE = pa.table({"text": ["a", "b", "c", "d", "e"], "id": [10, 11, 12, 13, 14]})
P_YES = [(0.9, 0.6), (0.2, 0.9), (0.8, 0.7), (0.7, 0.8), (0.3, 0.6)]
PASSED = [True, False, True, True, False]


def _results(rows: tuple[int, ...] = (0, 1, 2, 3, 4), raw: bool = False) -> pa.Table:
    p1, p2 = [P_YES[r % 5][0] for r in rows], [P_YES[r % 5][1] for r in rows]
    columns = {"row": pa.array(list(rows), pa.int64()), "passed": pa.array([PASSED[r % 5] for r in rows], pa.bool_()),
               "p_yes_1": pa.array(p1, pa.float64()), "p_yes_2": pa.array(p2, pa.float64())}
    if raw:
        columns |= {"p_yes_raw_1": pa.array([p / 2 for p in p1]), "p_yes_raw_2": pa.array([p / 2 for p in p2])}
    return pa.table(columns)


def test_a_filter_without_keep_all_keeps_the_rows_that_passed_in_order():
    out = RUN.shape(SPEC, _results(), [TABLE], "t")
    assert out.column_names == ["text", "id"]
    assert out.column("id").to_pylist() == [10, 12, 13]


def test_a_limit_keeps_only_the_first_n_rows_that_passed():
    out = RUN.shape(dataclasses.replace(SPEC, limit=2), _results(), [TABLE], "t")
    assert out.column("id").to_pylist() == [10, 12]


def test_keep_all_keeps_every_row_with_the_columns_as_computed_and_nulls_where_unanswered():
    results = _results((0, 2, 3, 4), raw=True)  # row 1 was never asked
    out = RUN.shape(dataclasses.replace(SPEC, keep_all=True), results, [TABLE], "t")
    assert out.column_names == ["text", "id", "passed", "p_yes_1", "p_yes_2", "p_yes_raw_1", "p_yes_raw_2"]
    assert out.column("id").to_pylist() == [10, 11, 12, 13, 14]
    assert out.column("passed").to_pylist() == [True, None, True, True, False]
    assert out.column("p_yes_1").to_pylist() == [0.9, None, 0.8, 0.7, 0.3]
    assert out.column("p_yes_raw_2").to_pylist() == [0.3, None, 0.35, 0.4, 0.3]


@pytest.mark.parametrize(("limit", "ids"), [(1, [10]), (2, [10, 11, 12]), (3, [10, 11, 12, 13]),
                                            (4, [10, 11, 12, 13, 14])])
def test_keep_all_under_a_limit_cuts_after_the_nth_passing_row_and_not_where_fewer_passed(limit: int,
                                                                                          ids: list[int]):
    out = RUN.shape(dataclasses.replace(SPEC, keep_all=True, limit=limit), _results(), [TABLE], "t")
    assert out.column("id").to_pylist() == ids
    assert out.column("passed").to_pylist() == PASSED[: len(ids)]


def test_keep_all_refuses_an_input_that_already_has_an_answer_column_by_any_case():
    table = TABLE.append_column("Passed", pa.array([1, 2, 3, 4, 5]))
    assert RUN.shape(SPEC, _results(), [table], "news.parquet").num_rows == 3
    with pytest.raises(QuailError, match=r"^news\.parquet: already has the column\(s\) \['passed'\]"):
        RUN.shape(dataclasses.replace(SPEC, keep_all=True), _results(), [table], "news.parquet")


def test_output_rows_are_the_passing_rows_up_to_the_limit_or_every_answered_row_under_keep_all():
    assert RUN.output_rows(SPEC, _results()) == [0, 2, 3]
    assert RUN.output_rows(dataclasses.replace(SPEC, limit=2), _results()) == [0, 2]
    assert RUN.output_rows(dataclasses.replace(SPEC, keep_all=True), _results((0, 1, 3))) \
        == [0, 1, 3]


def test_the_rows_that_passed_count_toward_a_limit_and_no_results_count_none():
    assert RUN.counted_rows(_results()) == 3
    assert RUN.counted_rows(_results(())) == 0


def test_observed_is_rows_asked_and_passed_and_nothing_under_a_limit():
    assert RUN.observed(SPEC, _results()) == (5, 3)
    assert RUN.observed(dataclasses.replace(SPEC, limit=10), _results()) is None


def test_in_window_shifts_the_row_column_by_the_windows_offset():
    results = _results((100, 101, 102, 103, 104))
    window = RUN.in_window(results, 100)
    assert window.column_names == results.column_names
    assert window.column("row").to_pylist() == [0, 1, 2, 3, 4]
    assert window.column("p_yes_1").equals(results.column("p_yes_1"))
    assert RUN.shape(SPEC, window, [TABLE], "t").column("id").to_pylist() == [10, 12, 13]
