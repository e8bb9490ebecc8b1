"""What every operator kind is, below the planner: its settings, its checks, the shape of its
prompts and the tokens its prediction needs. Pure: no torch, no pyarrow, nothing that runs a
model. How a kind computes and shapes its output is its run-time class (quail/runtime/)."""

import argparse
from dataclasses import dataclass, field
from typing import Protocol

from quail.errors import QuailError
from quail.planner.specs import Cascade, OperatorSpec

CALIBRATIONS = ("auto", "none", "contextual")  # auto: the model's own (model/registry.py)


@dataclass(frozen=True)
class OperatorTokens:
    docs: list[list[int]]  # the operator's documents, one per row of its source table
    questions: list[int]  # token counts: the predicates, the question, or the join condition
    labels: list[int] = field(default_factory=list)  # classify: token count of each label
    partners: list[int] = field(default_factory=list)  # join: token count of each right row
    stem: int = 0  # opening tokens that every question (or partner) shares: chain mode computes them once


class Layout(Protocol):
    """The prompt layout's token counts a kind's prediction reads (ops/prompts.PromptLayout)."""

    def yes_no_question(self, question: str) -> list[int]: ...
    def label_question(self, question: str, labels: list[str]) -> list[int]: ...
    def label(self, label: str) -> list[int]: ...
    def pair_question(self, condition: str, name: str) -> list[int]: ...
    def partners(self, texts: list[str], name: str) -> list[list[int]]: ...


class OperatorKind:
    name: str
    summary: str  # one line, for `quail --help`
    arity = 1  # input tables, each with a text column
    narrows = False  # drops rows (a filter): its selectivity shapes what later operators read
    keeps_rows = True  # its output rows are its input's rows (a join's are new rows: pairs)
    anchor = "row"  # the answers' column of first-input row numbers
    keys: frozenset[str] = frozenset()  # a pipeline file's settings for it

    # the specs: from a pipeline file, from the command line, and their checks
    def from_settings(self, name: str, body: dict, output: str | None) -> OperatorSpec:
        raise NotImplementedError

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def from_args(self, args: argparse.Namespace) -> tuple[dict[str, str], OperatorSpec]:
        """The tables and the spec of a one-operator command."""
        raise NotImplementedError

    def validate(self, spec: OperatorSpec, where: str) -> None:
        if len(spec.inputs) != self.arity or len(spec.columns) != self.arity:
            raise QuailError(f"{where}: a {self.name} takes {self.arity} input(s), each with a text column")
        if not spec.questions or not all(q.strip() for q in spec.questions):
            raise QuailError(f"{where}: give at least one non-empty {self.question_word}")
        if not 0.0 <= spec.threshold <= 1.0:
            raise QuailError(f"{where}: threshold {spec.threshold} is outside [0, 1]")
        self.check_limit(spec, where)
        self.check_top_k(spec, where)
        self.check_cascade(spec, where)
        if spec.calibration not in CALIBRATIONS:
            raise QuailError(f"{where}: calibration {spec.calibration!r} is not one of {', '.join(CALIBRATIONS)}")

    question_word = "question"

    def check_limit(self, spec: OperatorSpec, where: str) -> None:
        if spec.limit is not None:
            raise QuailError(f"{where}: limit must be a positive number of rows, on a filter")

    def check_top_k(self, spec: OperatorSpec, where: str) -> None:
        if spec.top_k is not None:
            raise QuailError(f"{where}: top_k is for a join (the best K right rows of each left row)")

    def check_cascade(self, spec: OperatorSpec, where: str) -> None:
        if spec.cascade is not None:
            raise QuailError(f"{where}: a cascade is for a filter (its unsure rows go to a larger model)")

    # predicting it
    def asks_more_than_once(self, spec: OperatorSpec) -> bool:
        """Whether a document is asked more than one prompt: chain mode then has work to save."""
        return True

    def tokens(self, layout: Layout, spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> OperatorTokens:
        raise NotImplementedError

    def document_room(self, t: OperatorTokens, context: int) -> int:
        """The most tokens a document keeps under --truncate: the context less what follows it in
        its longest prompt (as Session cuts them)."""
        return context - max(t.questions)

    def prompts(self, t: OperatorTokens, selectivity: float | None) -> tuple[list[tuple[float, int]], int]:
        """Per document: (probability it is asked, tokens beyond the document) for each prompt, and
        the tokens every prompt shares after the document (chain mode computes them once)."""
        raise NotImplementedError


def texts_setting(body: dict, key: str, where: str, kind: str) -> tuple[str, ...]:
    value = required(body, key, where, kind)
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise QuailError(f"{where}: {key!r} must be text or a list of texts")
    return tuple(values)


def required(body: dict, key: str, where: str, kind: str):
    if key not in body:
        raise QuailError(f"{where}: {kind} needs {key!r}")
    return body[key]


def name_setting(body: dict, key: str, where: str, kind: str) -> str:
    """A table, operator or column name: text (a number such as a year is taken as its text)."""
    value = required(body, key, where, kind)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise QuailError(f"{where}: {key!r} must be a name, got {value!r}")
    return str(value)


def number_setting(body: dict, key: str, where: str, default: float) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QuailError(f"{where}: {key!r} must be a number, got {value!r}")
    return float(value)


def count_setting(body: dict, key: str, where: str) -> int | None:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise QuailError(f"{where}: {key!r} must be a whole number of rows, got {value!r}")
    return value


def calibration_setting(body: dict, where: str) -> str:
    value = body.get("calibration", "auto")
    if value not in CALIBRATIONS:
        raise QuailError(f"{where}: 'calibration' must be one of {', '.join(CALIBRATIONS)}, got {value!r}")
    return value


def cascade_setting(body: dict, where: str) -> Cascade | None:
    """cascade: {model: NAME, band: [LOW, HIGH]}."""
    value = body.get("cascade")
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"model", "band"}:
        raise QuailError(f"{where}: 'cascade' must be {{model: NAME, band: [LOW, HIGH]}}, got {value!r}")
    band = value["band"]
    if not (isinstance(band, list) and len(band) == 2
            and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in band)):
        raise QuailError(f"{where}: cascade 'band' must be two numbers [LOW, HIGH], got {band!r}")
    return Cascade(name_setting(value, "model", where, "cascade"), float(band[0]), float(band[1]))


def flag_setting(body: dict, key: str, where: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise QuailError(f"{where}: {key!r} must be true or false, got {value!r}")
    return value
