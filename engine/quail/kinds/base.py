"""What every operator kind is, below the planner: its settings, its checks, the shape of its
prompts and the tokens its prediction needs. Pure: no torch, no pyarrow, nothing that runs a
model. How a kind computes and shapes its output is its run-time class (quail/runtime/)."""

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from quail.errors import QuailError
from quail.kinds.settings import Settings
from quail.specs import OperatorSpec

# The answer store's key of what was asked and a document, for one model (store/keys.py `answer_key`
# with the model's identity bound): a kind's `keys` say what each of its answers is keyed by.
Key = Callable[[str, list[int]], bytes]


def calibration_word(calibrated: bool) -> str:
    """How a key names whether contextual calibration was on (ops/calibration.py)."""
    return "contextual" if calibrated else "none"


@dataclass(frozen=True)
class OperatorTokens:
    docs: list[list[int]]  # the operator's documents, one per row of its source table
    questions: list[int]  # token counts: the predicates, the question, or the join condition
    labels: list[int] = field(default_factory=list)  # classify: token count of each label
    partners: list[int] = field(default_factory=list)  # join: token count of each right row
    stem: int = 0  # opening tokens that every question (or partner) shares: rewind computes them once
    written: int = 0  # an extract's or a map's: the most tokens it writes after its prompt
    asked: float = 1.0  # a join's: the share of its pairs it is expected to ask (a blocked join's: planner/recall.py)


class Layout(Protocol):
    """The prompt layout's token counts a kind's prediction reads (ops/prompts.PromptLayout)."""

    def yes_no_question(self, question: str) -> list[int]: ...
    def label_question(self, question: str, labels: list[str], descriptions: tuple[str, ...] = ()) -> list[int]: ...
    def label(self, label: str) -> list[int]: ...
    def pair_question(self, condition: str, name: str) -> list[int]: ...
    def pair_lead(self, condition: str, name: str) -> list[int]: ...
    cue: list[int]
    def writing_question(self, text: str) -> list[int]: ...
    def partners(self, texts: list[str], name: str) -> list[list[int]]: ...

    @property
    def document_head(self) -> int: ...  # the tokens of a document besides its text


class OperatorKind:
    name: str
    summary: str  # one line, for `quail --help`
    arity = 1  # input tables, each with a text column
    narrows = False  # drops rows (a filter): its selectivity shapes what later operators read
    keeps_rows = True  # its output rows are its input's rows (a join's are new rows: pairs)
    anchor = "row"  # the answers' column of first-input row numbers
    settings: type[Settings]  # its pydantic settings model, which builds its specs

    # the specs: from a pipeline file, from the command line, and their checks
    def from_settings(self, name: str, body: dict, output: str | None) -> OperatorSpec:
        """A pipeline file's operator: its settings mapping, checked by the settings model."""
        return self.settings.parse(body, f"operator {name!r}").spec(name, output)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def from_args(self, args: argparse.Namespace) -> tuple[dict[str, str], OperatorSpec]:
        """The tables and the spec of a one-operator command."""
        raise NotImplementedError

    def validate(self, spec: OperatorSpec, where: str) -> None:
        """A spec that arrived whole (a job submission, a plan), checked by the kind's settings model."""
        if len(spec.inputs) != self.arity or len(spec.columns) != self.arity:
            raise QuailError(f"{where}: a {self.name} takes {self.arity} input(s), each with a text column")
        self.settings.of_spec(spec, where)

    @property
    def question_word(self) -> str:
        return self.settings.question_word

    prompt_word: str | None = None  # what makes its prompt long, where more than the question

    def columns_added(self, spec: OperatorSpec) -> list[str]:
        """The columns its output adds beside its input's, where they must not clash with them before
        any work (the others are checked as the output is shaped)."""
        return []

    # predicting it
    def field_keys(self, spec: OperatorSpec) -> list[str]:
        """The keys of the written-token counts (cost/observed.py) whose observed means make a row's
        expected writing; none for a kind that writes nothing."""
        return []

    def expected_written(self, spec: OperatorSpec, means: list[float]) -> float:
        """The tokens a row is expected to write, from the means of its `field_keys`."""
        return sum(means)

    def asks_more_than_once(self, spec: OperatorSpec) -> bool:
        """Whether a document is asked more than one prompt: rewind then has work to save."""
        return True

    def tokens(self, layout: Layout, spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> OperatorTokens:
        raise NotImplementedError

    def document_room(self, t: OperatorTokens, context: int) -> int:
        """The most tokens a document keeps under --truncate: the context less what follows it in
        its longest prompt (as ops/prompts.py `fit` cuts them)."""
        return context - max(t.questions) - t.written

    def check_room(self, layout: Layout, spec: OperatorSpec, context: int, where: str) -> None:
        """Refuses, before any work, a question so long that its prompt leaves a document's text no
        room in the model's context: cut to fit, every document would be the same few tokens, and
        every row would get the same answer."""
        several = len(spec.questions) > 1
        for i, question in enumerate(spec.questions, 1):
            t = self.tokens(layout, replace(spec, questions=(question,)), [], [])
            room = self.document_room(t, context) - layout.document_head
            if room < 1:
                word = f"{self.question_word} {i}" if several else self.prompt_word or self.question_word
                written = f" and max_new_tokens {t.written:,}" if t.written else ""
                raise QuailError(f"{where}: {word} is {t.questions[0] + max(t.labels, default=0):,} tokens with its "
                                 f"prompt{written}, which leaves {max(room, 0)} of the model's {context:,}-token "
                                 f"context for a document's text; shorten the {self.prompt_word or self.question_word}"
                                 + (" or lower max_new_tokens" if t.written else ""))

    def prompts(self, t: OperatorTokens, selectivity: float | None) -> tuple[list[tuple[float, int]], int]:
        """Per document: (probability it is asked, tokens beyond the document) for each prompt, and
        the tokens every prompt shares after the document (rewind computes them once)."""
        raise NotImplementedError

