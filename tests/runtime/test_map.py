"""runtime/map.py: a window's map results placed beside its input rows, in the column it names, and
the written tokens counted from the rows written whole, without a model."""

import dataclasses

import pyarrow as pa
import pytest

from quail.errors import QuailError
from quail.runtime.map import MapRuntime
from quail.specs import OperatorSpec

RUN = MapRuntime()
SPEC = OperatorSpec("m", "map", ("t",), ("text",), ("Summarize.",), max_new_tokens=32, output_column="summary",
                    calibration="none")
TABLE = pa.table({"text": ["a", "b", "c", "d"]})


def _results(rows: tuple[int, ...] = (0, 2, 3), written: str = "summary",
             truncated: tuple[bool, ...] = (False, True, False)) -> pa.Table:
    texts = ["two words", "cut off mid", "three more words"]
    return pa.table({"row": pa.array(list(rows), pa.int64()), written: pa.array(texts, pa.string()),
                     "truncated": pa.array(truncated, pa.bool_())})


def test_a_map_puts_its_text_and_truncated_beside_its_input_with_nulls_where_unanswered():
    out = RUN.shape(SPEC, _results(), [TABLE], "t")
    assert out.schema == pa.schema([("text", pa.string()), ("summary", pa.string()), ("truncated", pa.bool_())])
    assert out.column("summary").to_pylist() == ["two words", None, "cut off mid", "three more words"]
    assert out.column("truncated").to_pylist() == [False, None, True, False]


def test_a_map_without_an_output_column_writes_mapped():
    out = RUN.shape(dataclasses.replace(SPEC, output_column=None), _results(written="mapped"), [TABLE], "t")
    assert out.column_names == ["text", "mapped", "truncated"]


def test_an_input_that_already_has_the_output_column_by_any_case_is_refused():
    table = TABLE.append_column("Summary", pa.array(["w", "x", "y", "z"]))
    with pytest.raises(QuailError, match=r"^notes\.parquet: already has the column\(s\) \['summary'\]"):
        RUN.shape(SPEC, _results(), [table], "notes.parquet")


def test_written_tokens_are_counted_over_the_rows_written_whole_under_the_instruction():
    asked: list[str] = []

    def encode(texts: list[str]) -> list[list[str]]:
        asked.extend(texts)
        return [t.split() for t in texts]

    assert RUN.written_observed(SPEC, _results(), encode) == {"map\x1fSummarize.": (2, 5)}
    assert asked == ["two words", "three more words"]
    assert RUN.written_observed(SPEC, _results(truncated=(True, True, True)), encode) == {}


def test_every_answered_row_is_output_counted_and_no_selectivity_observed():
    assert RUN.output_rows(SPEC, _results()) == [0, 2, 3]
    assert RUN.counted_rows(_results()) == 3
    assert RUN.observed(SPEC, _results()) is None


def test_in_window_shifts_the_row_column_by_the_windows_offset():
    window = RUN.in_window(_results((1000, 1002, 1003)), 1000)
    assert window.column("row").to_pylist() == [0, 2, 3]
    assert window.column_names == ["row", "summary", "truncated"]
    assert RUN.shape(SPEC, window, [TABLE], "t").column("summary").to_pylist() \
        == ["two words", None, "cut off mid", "three more words"]
