"""map: a short text written for each row by an instruction ("Summarize the review in one sentence."),
after the document, to the model's end of turn or max_new_tokens (then marked truncated)."""

import argparse
from typing import ClassVar

from quail.kinds.base import Layout, OperatorTokens
from quail.kinds.settings import Name, Settings, Text
from quail.kinds.writes import RESERVED, NewTokens, Writes, add_max_new_tokens, check_writing, most_written
from quail.specs import OperatorSpec

DEFAULT_COLUMN = "mapped"


def render(layout: Layout, instruction: str) -> list[int]:
    """The prompt after the document: the one rendering that prediction and the session share."""
    return layout.writing_question(instruction)


def asked(question: list[int], most: int) -> str:
    """What a written output's key in the answer store names besides the model and the document
    (kinds/writes.py `keys`): the prompt after the document and max_new_tokens."""
    return f"map\x1f{question}\x1f{most}"


class MapSettings(Settings):
    kind: ClassVar[str] = "map"
    question_word: ClassVar[str] = "instruction"
    cascade_metrics: ClassVar[tuple[str, ...]] = ()
    input: Name
    column: Name
    instruction: Text
    output_column: Name = DEFAULT_COLUMN
    max_new_tokens: NewTokens = None  # kinds/writes.py `most_written` when none is given

    def spec(self, name: str, output: str | None) -> OperatorSpec:
        return OperatorSpec(name, self.kind, (self.input,), (self.column,), (self.instruction or "",),
                            output_column=self.output_column,
                            max_new_tokens=most_written(self.max_new_tokens), calibration="none",
                            output=output)

    @classmethod
    def body(cls, spec: OperatorSpec) -> dict:
        instruction = spec.questions[0] if len(spec.questions) == 1 else list(spec.questions)
        return {"input": spec.inputs[0], "column": spec.columns[0], "instruction": instruction,
                "output_column": spec.output_column, "max_new_tokens": spec.max_new_tokens}

    def questions(self) -> tuple[str, ...]:
        return (self.instruction or "",)

    def check(self, flags: dict[str, str]) -> None:
        super().check(flags)
        check_writing(self.max_new_tokens)
        if not self.output_column.strip() or self.output_column.casefold() in RESERVED:
            raise ValueError(f"output_column {self.output_column!r} must be a name other than {', '.join(RESERVED)}")


class Map(Writes):
    name = "map"
    summary = "a short text written for each row by an instruction"
    settings = MapSettings

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("input")
        p.add_argument("--text-column", required=True)
        p.add_argument("--instruction", required=True, help="what to write for each row")
        p.add_argument("--output-column", default=DEFAULT_COLUMN, help="the column it writes")
        add_max_new_tokens(p)

    def from_args(self, args: argparse.Namespace) -> tuple[dict[str, str], OperatorSpec]:
        settings = MapSettings.parse({"input": "input", "column": args.text_column, "instruction": args.instruction,
                                      "output_column": args.output_column, "max_new_tokens": args.max_new_tokens},
                                     "map", {"questions": "--instruction"})
        return {"input": args.input}, settings.spec("map", args.output)

    def columns_added(self, spec: OperatorSpec) -> list[str]:
        return [spec.output_column or DEFAULT_COLUMN, "truncated"]

    def field_keys(self, spec: OperatorSpec) -> list[str]:
        return [f"map\x1f{spec.questions[0]}"]

    def tokens(self, layout: Layout, spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> OperatorTokens:
        return self.written(docs, render(layout, spec.questions[0]), spec)
