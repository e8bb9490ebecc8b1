"""An extract's fields: one FieldSpec tuple from every way of giving them, a JSON Schema that allows
exactly each field's type or null, and the prompt's field list."""

import datetime
import json

import jsonschema
import pytest

from quail.errors import QuailError
from quail.kinds import KINDS
from quail.kinds.extract import field_from_text, json_schema, parse_fields, read_fields
from quail.specs import FieldSpec

EXPECTED = (FieldSpec("amount", "float", "the total"), FieldSpec("sentiment", "enum", "", ("pos", "neg")),
            FieldSpec("tags", "list[str]"))


def test_every_way_of_giving_fields_gives_the_same_ones():
    assert parse_fields({"amount": {"type": "float", "description": "the total"}, "sentiment": ["pos", "neg"],
                         "tags": "list[str]"}) == EXPECTED
    assert parse_fields(["amount:float=the total", "sentiment:pos|neg", "tags:list[str]"]) == EXPECTED
    assert parse_fields({"type": "object", "properties": {
        "amount": {"type": ["number", "null"], "description": "the total"},
        "sentiment": {"anyOf": [{"enum": ["pos", "neg"]}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string"}}}}) == EXPECTED
    assert field_from_text("when:date=the day it was paid") == FieldSpec("when", "date", "the day it was paid")


def test_the_schema_allows_each_type_or_null_and_nothing_else():
    schema = json_schema(EXPECTED + (FieldSpec("n", "int"), FieldSpec("d", "date"), FieldSpec("b", "bool")))
    jsonschema.validate({"amount": 1.5, "sentiment": "pos", "tags": ["a"], "n": 3, "d": "2024-01-02", "b": True},
                        schema)
    jsonschema.validate(dict.fromkeys(("amount", "sentiment", "tags", "n", "d", "b")), schema)
    for bad in ({"amount": "1.5"}, {"sentiment": "meh"}, {"tags": "a"}, {"n": 1.5}, {"b": 1}, {"extra": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(dict.fromkeys(("amount", "sentiment", "tags", "n", "d", "b")) | bad, schema)


@pytest.mark.parametrize("body, says", [
    ({"fields": {}}, "give at least one field"),
    ({"fields": {"a": "decimal"}}, "field 'a': type 'decimal' is not one of"),
    ({"fields": {"a": []}}, "field 'a': an enum needs its values"),
    ({"fields": {"a": {"type": "str", "values": ["x"]}}}, "field 'a': only an enum takes values"),
    ({"fields": {"row": "int"}}, "field name 'row' is a column the output has"),
    ({"fields": {"a": "str"}, "max_new_tokens": 0}, "max_new_tokens must be at least 1, got 0"),
    ({"fields": {"a": "str"}, "max_new_tokens": "9"}, "'max_new_tokens' must be a whole number of tokens"),
    ({"fields": {"a": "str"}, "instruction": " "}, "instruction 1 is empty"),
    ({"fields": 3}, "'fields' must be a mapping"),
    ({"fields": {"a": ["yes", "Yes"]}}, "field 'a': values 'yes' and 'Yes' look alike"),
    ({"fields": {"a": ["yes", " no"]}}, "field 'a': value 2 starts or ends with a space"),
    ({"fields": {"a": ["yes", "n\u200bo"]}}, "field 'a': value 2 holds invisible or reordering characters (U+200B)"),
    ({"fields": {"a": ["yes", "yes"]}}, "field 'a': values ['yes'] appear more than once"),
])
def test_bad_fields_name_what_is_wrong(body, says):
    with pytest.raises(QuailError, match=None) as e:
        KINDS["extract"].from_settings("x", {"input": "t", "column": "text"} | body, None)
    assert str(e.value).startswith("operator 'x': ") and says in str(e.value)


def test_a_spec_that_arrives_whole_is_checked_as_a_file_is():
    spec = KINDS["extract"].from_settings("x", {"input": "t", "column": "text", "fields": {"a": "str"}}, None)
    KINDS["extract"].validate(spec, "a job submission")
    again = KINDS["extract"].settings.of_spec(spec, "a job submission").spec("x", None)
    assert again == spec
    m = KINDS["map"].from_settings("m", {"input": "t", "column": "text", "instruction": "Sum it up."}, None)
    KINDS["map"].validate(m, "a job submission")
    assert m.output_column == "mapped" and m.max_new_tokens == 256
    assert spec.calibration == m.calibration == "none"  # nothing is read off one position to calibrate


def test_a_written_output_is_read_only_as_the_schema_and_the_columns_allow():
    fields = tuple(field_from_text(t) for t in ("n:int", "x:float", "kind:invoice|letter|other", "d:date",
                                                "tags:list[str]", "ok:bool"))
    big = 98765432109876543210987654321

    def read(**values):
        return read_fields(fields, json.dumps({"n": None, "x": None, "kind": None, "d": None, "tags": None,
                                               "ok": None} | values))

    assert read(n=3, x=2, kind="letter", d="2024-02-29", tags=["a"], ok=True) == (
        {"n": 3, "x": 2.0, "kind": "letter", "d": datetime.date(2024, 2, 29), "tags": ["a"], "ok": True}, [])
    # what the schema allows and no column holds: null, and named
    assert read(n=big, x=big, d="2023-02-29")[1] == ["n", "d"]
    assert read(x=float("inf"))[1] == ["x"] and read(n=-(10 ** 17 - 1))[1] == []
    assert read(n=10 ** 17)[1] == ["n"]  # it reached the grammar's bound of 18 digits: perhaps cut there
    # not the schema's: never read, whatever it holds
    for bad in (dict(kind="HACKED"), dict(n=True), dict(n=1.5), dict(x="1"), dict(tags=[1]), dict(ok=1),
                dict(extra=1)):
        assert read(**bad) is None, bad
    for text in ('{"n": 1', "[]", "null", '{"n": null}', "[" * 100_000):
        assert read_fields(fields, text) is None


def test_a_type_word_in_an_enum_is_refused_and_a_list_of_words_is_an_enum():
    with pytest.raises(ValueError, match=r"\['date', 'str'\] name types"):
        field_from_text("a:date|str")
    assert parse_fields({"a": ["date", "str"]})[0].values == ("date", "str")
