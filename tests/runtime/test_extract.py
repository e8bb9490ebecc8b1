"""runtime/extract.py: a window's extract results placed beside its input rows, each field in its
typed column, and the written tokens counted from the rows written whole, without a model."""

import datetime

import pyarrow as pa
import pytest

from quail.errors import QuailError
from quail.runtime.extract import ExtractRuntime, column
from quail.specs import FieldSpec, OperatorSpec

RUN = ExtractRuntime()
FIELDS = (FieldSpec("city", "str"), FieldSpec("year", "int"), FieldSpec("born", "date"), FieldSpec("tags", "list[str]"))
SPEC = OperatorSpec("e", "extract", ("t",), ("text",), ("Fill in.",), fields=FIELDS, max_new_tokens=64,
                    calibration="none")
TABLE = pa.table({"text": ["a", "b", "c", "d"]})
VALUES = [{"city": "Zürich", "year": 1961, "born": datetime.date(1961, 3, 1), "tags": ["x", "y"]},
          None,  # cut before its JSON closed
          {"city": "York", "year": None, "born": None, "tags": []}]


def _results(offset: int = 0, truncated: tuple[bool, ...] = (False, True, False)) -> pa.Table:
    columns = {"row": pa.array([offset, offset + 1, offset + 2], pa.int64())}
    for f in FIELDS:
        columns[f.name] = column(f, [None if v is None else v[f.name] for v in VALUES])
    columns["truncated"] = pa.array(truncated, pa.bool_())
    columns["invalid"] = pa.array([[], [], ["year"]], pa.list_(pa.string()))
    return pa.table(columns)


def test_an_extract_puts_each_fields_typed_column_then_truncated_and_invalid_beside_its_input():
    out = RUN.shape(SPEC, _results(), [TABLE], "t")
    assert out.schema == pa.schema([("text", pa.string()), ("city", pa.string()), ("year", pa.int64()),
                                    ("born", pa.date32()), ("tags", pa.list_(pa.string())),
                                    ("truncated", pa.bool_()), ("invalid", pa.list_(pa.string()))])
    assert out.column("born").to_pylist() == [datetime.date(1961, 3, 1), None, None, None]
    assert out.column("tags").to_pylist() == [["x", "y"], None, [], None]
    assert out.column("truncated").to_pylist() == [False, True, False, None]
    assert out.column("invalid").to_pylist() == [[], [], ["year"], None]


def test_each_field_type_has_its_arrow_type():
    types = {t: column(FieldSpec("x", t), [None]).type for t in ("str", "int", "float", "bool", "date", "enum",
                                                                   "list[str]")}
    assert types == {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
                     "date": pa.date32(), "enum": pa.string(), "list[str]": pa.list_(pa.string())}


def test_an_input_that_already_has_an_added_column_by_any_case_is_refused():
    table = TABLE.append_column("Invalid", pa.array([0, 1, 2, 3]))
    with pytest.raises(QuailError, match=r"^people\.csv: already has the column\(s\) \['invalid'\]"):
        RUN.shape(SPEC, _results(), [table], "people.csv")


def test_written_tokens_are_each_fields_name_and_json_value_over_the_rows_written_whole():
    asked: list[str] = []

    def encode(texts: list[str]) -> list[list[str]]:
        asked.extend(texts)
        return [t.split() for t in texts]

    seen = RUN.written_observed(SPEC, _results(), encode)
    assert list(seen) == RUN.kind.field_keys(SPEC) and len(seen) == 4
    assert list(seen.values()) == [(2, 4), (2, 4), (2, 4), (2, 5)]
    assert asked == ['"city": "Zürich"', '"city": "York"', '"year": 1961', '"year": null', '"born": "1961-03-01"',
                     '"born": null', '"tags": ["x", "y"]', '"tags": []']


def test_no_written_tokens_are_observed_when_every_row_was_truncated():
    assert RUN.written_observed(SPEC, _results(truncated=(True, True, True)), lambda texts: [[1]] * len(texts)) == {}


def test_every_answered_row_is_output_counted_and_no_selectivity_observed():
    assert RUN.output_rows(SPEC, _results()) == [0, 1, 2]
    assert RUN.counted_rows(_results()) == 3
    assert RUN.observed(SPEC, _results()) is None


def test_in_window_shifts_the_row_column_by_the_windows_offset():
    window = RUN.in_window(_results(offset=1), 1)
    assert window.column("row").to_pylist() == [0, 1, 2]
    assert window.column_names == _results().column_names
    out = RUN.shape(SPEC, window, [TABLE], "t")
    assert out.column("city").to_pylist() == ["Zürich", None, "York", None]
