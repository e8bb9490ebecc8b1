"""extract: typed fields out of each row, written as one JSON object after the document and held to
the fields' JSON Schema as it is written (ops/grammar.py). Each field may be null where the document
does not say; a row whose output reached max_new_tokens before it was complete is marked truncated,
its fields null."""

import argparse
import dataclasses
import datetime
import functools
import json
import math
import unicodedata
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    create_model,
)

from quail.kinds.base import Layout, OperatorTokens
from quail.kinds.settings import Name, Settings, Text
from quail.kinds.words import check_choices
from quail.kinds.writes import RESERVED, NewTokens, Writes, add_max_new_tokens, check_writing, most_written
from quail.specs import FIELD_TYPES, FieldSpec, OperatorSpec

DEFAULT_INSTRUCTION = "Extract these fields from the document."
# One line with json.dumps' separators: the form models saw most. Without the spaces, the 0.5B
# wrote null for every nationality of bench/quality/extract.py's people; with free whitespace it
# wrote the same answers in a third more tokens. The grammar writes with them (ops/grammar.py), and
# they are part of a stored extraction's key (`asked`).
JSON_SEPARATORS = (", ", ": ")
INT_DIGITS = 18  # the most an int field's number is written with: so no serial runs to the token budget
_WORDS = {"str": "text", "int": "a whole number", "float": "a number", "bool": "true or false",
          "date": "a date, YYYY-MM-DD", "list[str]": "a list of texts"}
_JSON = {"str": {"type": "string"},
         "int": {"type": "integer", "minimum": 1 - 10 ** INT_DIGITS, "maximum": 10 ** INT_DIGITS - 1},
         "float": {"type": "number"},
         "bool": {"type": "boolean"}, "date": {"type": "string", "format": "date"},
         "list[str]": {"type": "array", "items": {"type": "string"}}}


def field_from_text(text: str) -> FieldSpec:
    """NAME:TYPE[=DESCRIPTION], as the command line gives a field; an enum's TYPE is its values
    joined by `|` (`sentiment:positive|negative|neutral`)."""
    head, eq, description = text.partition("=")
    name, colon, kind = head.partition(":")
    if not colon:
        raise ValueError(f"field {text!r} must be NAME:TYPE[=DESCRIPTION], TYPE one of {', '.join(FIELD_TYPES)} "
                         f"or values joined by '|'")
    return _field(name.strip(), kind.strip(), description.strip())


def _field(name: str, kind: Any, description: Any = "", values: Any = ()) -> FieldSpec:
    if isinstance(kind, (list, tuple)):
        kind, values = "enum", kind
    elif isinstance(kind, str) and "|" in kind:
        kind, values = "enum", kind.split("|")
        if typed_words := [v for v in values if v.strip() in FIELD_TYPES]:
            raise ValueError(f"field {name!r}: {'|'.join(values)!r} is an enum of words, and {typed_words} name "
                             f"types: a field has one type (a value may be null); to mean the words, give the enum's "
                             f"values as a list in a pipeline file")
    if kind not in FIELD_TYPES:
        raise ValueError(f"field {name!r}: type {kind!r} is not one of {', '.join(FIELD_TYPES)}, nor values "
                         f"joined by '|'")
    if not isinstance(description, str):
        raise ValueError(f"field {name!r}: the description must be text, got {description!r}")
    values = tuple(values)
    if kind == "enum" and (len(values) < 1 or not all(isinstance(v, str) and v.strip() for v in values)):
        raise ValueError(f"field {name!r}: an enum needs its values, each non-empty text, got {list(values)}")
    if kind == "enum":
        check_choices(values, f"field {name!r}: value")
        if dupes := sorted({v for v in values if values.count(v) > 1}):
            raise ValueError(f"field {name!r}: values {dupes} appear more than once")
    if kind != "enum" and values:
        raise ValueError(f"field {name!r}: only an enum takes values")
    return FieldSpec(name, kind, description, values)


def fields_from_json_schema(schema: dict) -> tuple[FieldSpec, ...]:
    """An object's properties as fields: string (format date: a date), integer, number, boolean,
    an enum of strings, an array of strings; each may also allow null."""
    properties = schema.get("properties")
    if schema.get("type", "object") != "object" or not isinstance(properties, dict):
        raise ValueError("a JSON Schema of fields must be an object with \"properties\"")
    defs = schema.get("$defs", {})
    return tuple(_from_property(name, prop, defs) for name, prop in properties.items())


def _from_property(name: str, prop: Any, defs: dict) -> FieldSpec:
    if not isinstance(prop, dict):
        raise ValueError(f"field {name!r}: its JSON Schema must be an object, got {prop!r}")
    description = prop.get("description", "")
    options = prop.get("anyOf") or prop.get("oneOf")
    if options is not None:  # X or null: the null is every field's anyway
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) != 1:
            raise ValueError(f"field {name!r}: a choice of several types is not a field type")
        prop = rest[0]
    if "$ref" in prop:
        prop = defs.get(prop["$ref"].rsplit("/", 1)[-1], {})
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = [k for k in kind if k != "null"]
        kind = kind[0] if len(kind) == 1 else kind
    if "enum" in prop or "const" in prop:
        return _field(name, list(prop["enum"]) if "enum" in prop else [prop["const"]], description)
    simple = {"integer": "int", "number": "float", "boolean": "bool"}
    if kind == "string":
        return _field(name, "date" if prop.get("format") == "date" else "str", description)
    if kind in simple:
        return _field(name, simple[kind], description)
    if kind == "array" and prop.get("items", {}).get("type") == "string":
        return _field(name, "list[str]", description)
    raise ValueError(f"field {name!r}: JSON Schema {json.dumps(prop)} is not one of the field types "
                     f"({', '.join(FIELD_TYPES)})")


def parse_fields(value: Any) -> tuple[FieldSpec, ...]:
    """The fields, given as a mapping of name to type (or to {type, description, values}, or to an
    enum's values), a JSON Schema object, a pydantic model class, or a list of NAME:TYPE[=DESCRIPTION]."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        return fields_from_json_schema(value.model_json_schema())
    if isinstance(value, dict) and "properties" in value:
        return fields_from_json_schema(value)
    if isinstance(value, dict):
        out = []
        for name, kind in value.items():
            if isinstance(kind, dict):
                if set(kind) - {"type", "description", "values"}:
                    raise ValueError(f"field {name!r}: give its type, description and values, got "
                                     f"{sorted(kind)}")
                out.append(_field(str(name), kind.get("type", "enum" if "values" in kind else None),
                                  kind.get("description", ""), kind.get("values", ())))
            else:
                out.append(_field(str(name), kind))
        return tuple(out)
    if isinstance(value, (list, tuple)) and all(isinstance(f, FieldSpec) for f in value):
        return tuple(value)
    if isinstance(value, (list, tuple)) and all(isinstance(f, str) for f in value):
        return tuple(field_from_text(f) for f in value)
    raise ValueError("'fields' must be a mapping of each field's name to its type, a JSON Schema object, a "
                     "pydantic model class, or a list of NAME:TYPE[=DESCRIPTION]")


Fields = Annotated[tuple[FieldSpec, ...], BeforeValidator(parse_fields)]


def json_schema(fields: tuple[FieldSpec, ...]) -> dict:
    """The JSON object the model writes: every field, each its type or null, nothing else."""
    def one(f: FieldSpec) -> dict:
        kind = {"type": "string", "enum": list(f.values)} if f.type == "enum" else _JSON[f.type]
        return {"anyOf": [kind, {"type": "null"}]}

    return {"type": "object", "properties": {f.name: one(f) for f in fields}, "required": [f.name for f in fields],
            "additionalProperties": False}


def instruction_text(instruction: str, fields: tuple[FieldSpec, ...]) -> str:
    """The question after the document: the instruction, then a line per field."""
    lines = []
    for f in fields:
        kind = "one of: " + ", ".join(f.values) if f.type == "enum" else _WORDS[f.type]
        lines.append(f"- {f.name} ({kind})" + (f": {f.description}" if f.description else ""))
    return (f"{instruction}\n" + "\n".join(lines) + "\nReply with one JSON object of these fields, null for a field "
            "the document does not give.")


def render(layout: Layout, instruction: str, fields: tuple[FieldSpec, ...]) -> list[int]:
    """The prompt after the document: the one rendering that prediction and the session share."""
    return layout.writing_question(instruction_text(instruction, fields))


def asked(question: list[int], fields: tuple[FieldSpec, ...], most: int) -> str:
    """What a written output's key in the answer store names besides the model and the document
    (kinds/writes.py `keys`): the prompt after the document, the fields' schema, max_new_tokens and
    the JSON's separators."""
    return (f"extract\x1f{question}\x1f{json.dumps(json_schema(fields), sort_keys=True)}\x1f{most}"
            f"\x1f{JSON_SEPARATORS}")


@functools.lru_cache(maxsize=64)
def _schema_model(fields: tuple[FieldSpec, ...]) -> type[BaseModel]:
    """json_schema(fields) as a pydantic model: JSON's types, strictly (an integer is a number, a
    boolean is neither)."""
    kinds: dict[str, Any] = {"str": StrictStr, "int": StrictInt, "float": StrictInt | StrictFloat,
                             "bool": StrictBool, "date": StrictStr, "list[str]": list[StrictStr]}
    columns: dict[str, Any] = {f"f{i}": ((Literal[f.values] if f.type == "enum" else kinds[f.type]) | None, ...)
                               for i, f in enumerate(fields)}
    return create_model("Written", __config__=ConfigDict(strict=True, extra="forbid"), **columns)


def read_fields(fields: tuple[FieldSpec, ...], text: str) -> tuple[dict, list[str]] | None:
    """A written output's fields as their columns hold them, and the names of those whose value no
    column of its type holds (null instead: an integer past int64, a number past a double, a date
    that does not exist); None where `text` is not one JSON object of the fields' schema (damaged)."""
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict) or set(obj) != {f.name for f in fields}:
            return None
        _schema_model(fields).model_validate({f"f{i}": obj[f.name] for i, f in enumerate(fields)})
    except (ValueError, ValidationError, RecursionError):
        return None
    values, invalid = {}, []
    for f in fields:
        values[f.name] = typed(f, obj[f.name])
        if values[f.name] is None and obj[f.name] is not None:
            invalid.append(f.name)
    return values, invalid


def typed(f: FieldSpec, value: Any) -> Any:
    """A written field's value as its column holds it (a date as a date, a number as a double, else as
    JSON gave it), or None where its column cannot hold it."""
    if value is None:
        return None
    if f.type == "int":  # one that reached the grammar's bound may have been cut there
        return value if abs(value) < 10 ** (INT_DIGITS - 1) else None
    if f.type == "float":
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    if f.type == "date":
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            return None
    return value


class ExtractSettings(Settings):
    kind: ClassVar[str] = "extract"
    question_word: ClassVar[str] = "instruction"
    cascade_metrics: ClassVar[tuple[str, ...]] = ()
    input: Name
    column: Name
    fields: Fields
    instruction: Text = None  # DEFAULT_INSTRUCTION when none is given
    max_new_tokens: NewTokens = None  # kinds/writes.py `most_written` when none is given

    def spec(self, name: str, output: str | None) -> OperatorSpec:
        return OperatorSpec(name, self.kind, (self.input,), (self.column,), (self.instruction or DEFAULT_INSTRUCTION,),
                            fields=self.fields, max_new_tokens=most_written(self.max_new_tokens),
                            calibration="none", output=output)  # written, not read off one position

    @classmethod
    def body(cls, spec: OperatorSpec) -> dict:
        instruction = spec.questions[0] if len(spec.questions) == 1 else list(spec.questions)
        return {"input": spec.inputs[0], "column": spec.columns[0], "fields": spec.fields,
                "instruction": instruction, "max_new_tokens": spec.max_new_tokens}

    def questions(self) -> tuple[str, ...]:
        return (self.instruction if self.instruction is not None else DEFAULT_INSTRUCTION,)

    def check(self, flags: dict[str, str]) -> None:
        super().check(flags)
        check_writing(self.max_new_tokens)
        if not self.fields:
            raise ValueError("give at least one field")
        names = [f.name for f in self.fields]
        if dupes := sorted({n for n in names if [m.casefold() for m in names].count(n.casefold()) > 1}):
            raise ValueError(f"duplicate fields {dupes} (SQL does not tell names apart by case)")
        for n in names:
            if not n.strip() or any(unicodedata.category(c)[0] == "C" for c in n):
                raise ValueError(f"field name {n!r} must be non-empty, printable text")
            if n.casefold() in RESERVED:
                raise ValueError(f"field name {n!r} is a column the output has besides the fields; rename it")


class Extract(Writes):
    name = "extract"
    summary = "typed fields out of each row, as columns"
    settings = ExtractSettings
    prompt_word = "instruction with its fields"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("input")
        p.add_argument("--text-column", required=True)
        p.add_argument("--field", action="append", default=[], metavar="NAME:TYPE[=DESCRIPTION]",
                       help=f"a field to fill in, TYPE one of {', '.join(t for t in FIELD_TYPES if t != 'enum')} or "
                            f"values joined by '|'; repeat for each")
        p.add_argument("--instruction", help="what to extract, before the field list")
        add_max_new_tokens(p)

    def from_args(self, args: argparse.Namespace) -> tuple[dict[str, str], OperatorSpec]:
        settings = ExtractSettings.parse({"input": "input", "column": args.text_column, "fields": args.field,
                                          "instruction": args.instruction, "max_new_tokens": args.max_new_tokens},
                                         "extract", {"questions": "--instruction"})
        return {"input": args.input}, settings.spec("extract", args.output)

    def columns_added(self, spec: OperatorSpec) -> list[str]:
        return [f.name for f in spec.fields] + ["truncated", "invalid"]

    def field_keys(self, spec: OperatorSpec) -> list[str]:
        """A field's mean is its `"name": value` tokens, kept per field, so that a schema that gains
        or loses a field still finds the others' means."""
        return [f"extract field\x1f{json.dumps(dataclasses.asdict(f), sort_keys=True)}" for f in spec.fields]

    def expected_written(self, spec: OperatorSpec, means: list[float]) -> float:
        return sum(means) + len(spec.fields) + 1  # the braces, and a separator between fields

    def tokens(self, layout: Layout, spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> OperatorTokens:
        return self.written(docs, render(layout, spec.questions[0], spec.fields), spec)
