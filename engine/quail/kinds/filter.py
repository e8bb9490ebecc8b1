"""filter: keep the rows for which every predicate holds (rewind asks the next predicate only
of rows that passed the previous one)."""

import argparse
from collections.abc import Sequence
from typing import ClassVar, cast

from quail.kinds.base import Key, Layout, OperatorKind, OperatorTokens, calibration_word
from quail.kinds.settings import (
    Calibration,
    CascadeSetting,
    Count,
    Flag,
    Name,
    Number,
    Settings,
    Texts,
    cascade_from_args,
)
from quail.prefix_tree import stem
from quail.specs import METRICS, OperatorSpec


def render(layout: Layout, predicates: Sequence[str]) -> list[list[int]]:
    """Each predicate's prompt after the document: the one rendering that prediction, the answer
    store's keys and the session share."""
    return [layout.yes_no_question(p) for p in predicates]


def keys(key: Key, questions: list[list[int]], docs: list[list[int]], calibrated: bool) -> list[list[bytes]]:
    """The answer store's keys of each document's raw P(yes) for each predicate (its prompt's tokens)."""
    asked = [f"filter\x1f{calibration_word(calibrated)}\x1f{q}" for q in questions]
    return [[key(a, d) for a in asked] for d in docs]


def stored_prompts(doc: list[int], questions: list[list[int]], asked: int) -> list[tuple[int, str]]:
    """The prompts (tokens, step) that a document's first `asked` stored answers stand for."""
    return [(len(doc) + len(questions[k]), f"predicate_{k + 1}") for k in range(asked)]


class FilterSettings(Settings):
    kind: ClassVar[str] = "filter"
    question_word: ClassVar[str] = "predicate"
    cascade_metrics: ClassVar[tuple[str, ...]] = METRICS
    input: Name
    column: Name
    predicates: Texts
    threshold: Number = 0.5
    limit: Count = None
    keep_all: Flag = False
    calibration: Calibration = "auto"
    cascade: CascadeSetting = None

    def spec(self, name: str, output: str | None) -> OperatorSpec:
        return OperatorSpec(name, self.kind, (self.input,), (self.column,), self.predicates, threshold=self.threshold,
                            limit=self.limit, keep_all=self.keep_all, calibration=self.calibration,
                            cascade=self.cascade, output=output)

    @classmethod
    def body(cls, spec: OperatorSpec) -> dict:
        return {"input": spec.inputs[0], "column": spec.columns[0], "predicates": spec.questions,
                "threshold": spec.threshold, "limit": spec.limit, "keep_all": spec.keep_all,
                "calibration": spec.calibration, "cascade": spec.cascade}

    def questions(self) -> tuple[str, ...]:
        return self.predicates

    def check(self, flags: dict[str, str]) -> None:
        super().check(flags)
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be a positive number of rows, on a filter")


class Filter(OperatorKind):
    name = "filter"
    summary = "keep the rows for which every predicate holds"
    narrows = True
    settings = FilterSettings

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("input")
        p.add_argument("--text-column", required=True)
        p.add_argument("--predicate", action="append", default=[], help="a yes/no question; repeat for several")
        p.add_argument("--keep-all", action="store_true", help="keep every row, adding passed and p_yes_1..k")
        p.add_argument("--limit", type=int, help="the first N passing rows, in input order")
        p.add_argument("--threshold", type=float, default=0.5)

    def from_args(self, args: argparse.Namespace) -> tuple[dict[str, str], OperatorSpec]:
        settings = FilterSettings.parse({"input": "input", "column": args.text_column, "predicates": args.predicate,
                                         "threshold": args.threshold, "limit": args.limit, "keep_all": args.keep_all,
                                         "calibration": args.calibration, "cascade": cascade_from_args(args)},
                                        "filter", {"questions": "--predicate"})
        return {"input": args.input}, settings.spec("filter", args.output)

    def asks_more_than_once(self, spec: OperatorSpec) -> bool:
        return len(spec.questions) > 1

    def tokens(self, layout: Layout, spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> OperatorTokens:
        questions = render(layout, spec.questions)
        return OperatorTokens(docs, [len(q) for q in questions], stem=stem(questions))

    def prompts(self, t: OperatorTokens, selectivity: float | None) -> tuple[list[tuple[float, int]], int]:
        # a filter narrows: the planner always gives it a selectivity (an estimate, or 1.0)
        per = cast(float, selectivity) ** (1 / len(t.questions))
        return [(per**j, q) for j, q in enumerate(t.questions)], t.stem
