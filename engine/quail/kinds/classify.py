"""classify: label each row with one of the given labels, each scored on the one document+question
state (multi-token labels by teacher forcing on top of it)."""

import argparse
from collections.abc import Sequence
from typing import Annotated, ClassVar

from pydantic import BeforeValidator

from quail.errors import QuailError
from quail.kinds.base import Key, Layout, OperatorKind, OperatorTokens, calibration_word
from quail.kinds.settings import Calibration, CascadeSetting, Count, Name, Settings, Text, cascade_from_args
from quail.kinds.words import DEFAULT_QUESTION, check_choices
from quail.specs import OperatorSpec


def _labels(value: object) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """labels: a list of names, or a mapping of each name to its description (shown in the prompt)."""
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, tuple) for v in value):
        return value  # already (names, descriptions)
    if isinstance(value, dict):
        for name, description in value.items():
            if not isinstance(name, str) or not isinstance(description, str):
                raise ValueError(f"'labels' maps each label to its description (text), got {name!r}: {description!r}")
            if not description.strip():
                raise ValueError(f"'labels': the description of {name!r} is empty")
        return tuple(value), tuple(value.values())
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError("'labels' must be a list of labels, or a mapping of each label to its description")
    return tuple(value), ()


def render(layout: Layout, question: str, labels: Sequence[str],
           descriptions: tuple[str, ...] = ()) -> tuple[list[int], list[list[int]]]:
    """The question's prompt after the document, and each label's tokens: the one rendering that
    prediction, the answer store's keys and the session share."""
    return layout.label_question(question, list(labels), descriptions), [layout.label(x) for x in labels]


def keys(key: Key, question: list[int], labels: list[list[int]], docs: list[list[int]],
         calibrated: bool) -> list[list[bytes]]:
    """The answer store's key of each document's labels' raw probabilities (one a row)."""
    # labels that begin others are scored as stopping there; answers stored before were not
    ends = "\x1fends" if any(a != b and b[:len(a)] == a for a in labels for b in labels) else ""
    asked = f"classify\x1f{calibration_word(calibrated)}\x1f{question}\x1f{labels}{ends}"
    return [[key(asked, d)] for d in docs]


def top_columns(k: int) -> list[str]:
    """A classify's top-k columns: the best label's probability, then each next label and its own."""
    return ["p_label"] + [f"{what}_{i}" for i in range(2, k + 1) for what in ("label", "p_label")]


Labels = Annotated[tuple[tuple[str, ...], tuple[str, ...]], BeforeValidator(_labels)]


class ClassifySettings(Settings):
    kind: ClassVar[str] = "classify"
    question_word: ClassVar[str] = "question"
    # a row is right or wrong: its label is the larger model's or not
    cascade_metrics: ClassVar[tuple[str, ...]] = ("accuracy",)
    input: Name
    column: Name
    labels: Labels
    question: Text = None  # DEFAULT_QUESTION when none is given
    top_k: Count = None  # 2 or more: the K best labels and their probabilities too
    calibration: Calibration = "auto"
    cascade: CascadeSetting = None  # on the top label's probability

    def spec(self, name: str, output: str | None) -> OperatorSpec:
        labels, descriptions = self.labels
        return OperatorSpec(name, self.kind, (self.input,), (self.column,), (self.question or DEFAULT_QUESTION,),
                            labels, descriptions, top_k=self.top_k, calibration=self.calibration,
                            cascade=self.cascade, output=output)

    @classmethod
    def body(cls, spec: OperatorSpec) -> dict:
        question = spec.questions[0] if len(spec.questions) == 1 else list(spec.questions)
        return {"input": spec.inputs[0], "column": spec.columns[0], "labels": (spec.labels, spec.descriptions),
                "question": question, "top_k": spec.top_k, "calibration": spec.calibration, "cascade": spec.cascade}

    def questions(self) -> tuple[str, ...]:
        return (self.question,) if self.question is not None else (DEFAULT_QUESTION,)

    def check(self, flags: dict[str, str]) -> None:
        super().check(flags)
        labels, descriptions = self.labels
        check_choices(labels, "label")
        if dupes := sorted({x for x in labels if labels.count(x) > 1}):
            raise ValueError(f"duplicate labels {dupes}: give at least two distinct labels")
        if len(labels) < 2:
            raise ValueError(f"give at least two distinct labels, got {list(labels)}")
        if descriptions and (len(descriptions) != len(labels) or not all(d.strip() for d in descriptions)):
            raise ValueError("give every label a description, or none (a description is non-empty text)")
        if self.top_k is None:
            return
        if not 2 <= self.top_k <= len(labels):
            raise ValueError(f"top_k must be between 2 and the number of labels ({len(labels)}), got {self.top_k}")
        if clash := sorted(set(top_columns(self.top_k)) & {f"p_{label}" for label in labels}):
            raise ValueError(f"with top_k, the output's columns {clash} would clash with labels' probability "
                             f"columns; rename those labels")


class Classify(OperatorKind):
    name = "classify"
    summary = "label each row with one of the given labels"
    settings = ClassifySettings
    prompt_word = "question with its labels"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("input")
        p.add_argument("--text-column", required=True)
        p.add_argument("--label", action="append", default=[], metavar="NAME[=DESCRIPTION]",
                       help="a label, with what it covers if given (shown in the prompt; the answer is scored on "
                            "the name); repeat for each, with a description for every label or none")
        p.add_argument("--question", help="the question the labels answer")
        p.add_argument("--top-k", type=int, help="2 or more: also the K best labels (label_2, ...) and their "
                                                 "probabilities (p_label, p_label_2, ...)")

    def from_args(self, args: argparse.Namespace) -> tuple[dict[str, str], OperatorSpec]:
        pairs = [label.partition("=") for label in args.label]
        for i, (name, eq, description) in enumerate(pairs, 1):
            if eq and not description.strip():  # NAME= is neither a name alone nor a described one
                raise QuailError(f"--label {i} ({name}): the description after '=' is empty")
        labels = (tuple(name for name, _, _ in pairs), tuple(d for _, eq, d in pairs if eq))
        settings = ClassifySettings.parse({"input": "input", "column": args.text_column, "labels": labels,
                                           "question": args.question, "top_k": args.top_k,
                                           "calibration": args.calibration, "cascade": cascade_from_args(args)},
                                          "classify", {"questions": "--question"})
        return {"input": args.input}, settings.spec("classify", args.output)

    def tokens(self, layout: Layout, spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> OperatorTokens:
        q, labels = render(layout, spec.questions[0], spec.labels, spec.descriptions)
        return OperatorTokens(docs, [len(q)], [len(x) for x in labels])

    def document_room(self, t: OperatorTokens, context: int) -> int:
        return context - t.questions[0] - max(t.labels)

    def prompts(self, t: OperatorTokens, selectivity: float | None) -> tuple[list[tuple[float, int]], int]:
        q = t.questions[0]  # every label is scored on the one document+question state
        prompts = [(1.0, q)] if min(t.labels) == 1 else []
        return prompts + [(1.0, q + n_label - 1) for n_label in t.labels if n_label > 1], q
