"""What every operator kind provides. One subclass per kind owns its settings, validation, prompt
rendering, programs, answer columns, output shape and prediction; adding a kind is one new file and
one line in kinds/__init__.py. Importing a kind loads no torch: the engine is imported where it runs."""

import argparse
from typing import TYPE_CHECKING

from quail.errors import QuailError
from quail.ops.calibration import CALIBRATIONS
from quail.planner.specs import Cascade, OperatorSpec

if TYPE_CHECKING:
    import pyarrow as pa

    from quail.executor.stats import Stats
    from quail.ops.prompts import PromptLayout
    from quail.planner.predict import OperatorTokens
    from quail.reuse import Retain, Reuse
    from quail.session import Session

Inputs = list[tuple[list[str], list[int]]]  # per input: its texts and their row numbers


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

    # running it
    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool, progress) -> tuple["pa.Table", "Stats"]:
        """The answers, one row per answered input row (keyed by `row`, or `left_row`/`right_row`)."""
        raise NotImplementedError

    def shape(self, spec: OperatorSpec, answers: "pa.Table", tables: list["pa.Table"],
              source: str) -> "pa.Table":
        """The output table from the input tables and the answers."""
        raise NotImplementedError

    def asks_more_than_once(self, spec: OperatorSpec) -> bool:
        """Whether a document is asked more than one prompt: chain mode then has work to save."""
        return True

    def in_window(self, answers: "pa.Table", offset: int) -> "pa.Table":
        """Answers keyed by row number within the window that starts at row `offset` of the table."""
        import pyarrow as pa
        import pyarrow.compute as pc

        i = answers.schema.get_field_index(self.anchor)
        return answers.set_column(i, self.anchor, pc.subtract(answers.column(i), pa.scalar(offset, pa.int64())))

    def counted_rows(self, answers: "pa.Table") -> int:
        """The rows of these answers that count toward a row limit."""
        return answers.num_rows

    def observed(self, spec: OperatorSpec, answers: "pa.Table") -> tuple[int, int] | None:
        """(rows asked, rows passed) for the selectivity store, from a kind that narrows its rows."""
        return None

    # predicting it
    def tokens(self, layout: "PromptLayout", spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> "OperatorTokens":
        raise NotImplementedError

    def document_room(self, t: "OperatorTokens", context: int) -> int:
        """The most tokens a document keeps under --truncate: the context less what follows it in
        its longest prompt (as Session cuts them)."""
        return context - max(t.questions)

    def prompts(self, t: "OperatorTokens", selectivity: float | None) -> tuple[list[tuple[float, int]], int]:
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
