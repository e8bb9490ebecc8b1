"""join: the pairs of left and right rows that satisfy a condition (rewind keeps each left
row's KV and rewinds past each right row); with top_k, each left row's K best right rows. Every
pair is ranked within its left row: 1 is the highest P(yes), ties going to the earlier right row."""

import argparse
import math
from dataclasses import dataclass
from typing import ClassVar, cast

from quail.kinds.base import Key, Layout, OperatorKind, OperatorTokens, calibration_word
from quail.kinds.settings import (
    Calibration,
    CascadeSetting,
    Count,
    Flag,
    MaybeNumber,
    Name,
    Number,
    Settings,
    Text,
    Texts,
    cascade_from_args,
)
from quail.kinds.words import ANCHOR, partner_name
from quail.prefix_tree import stem
from quail.sampling import FIRST_CUT, TOP_K_SLACK, predict_blocked, sample_size
from quail.specs import METRICS, OperatorSpec


def pair_room(context: int, condition: int) -> int:
    """The tokens each document of a pair may take: the context after the condition (its tokens),
    split evenly between the two documents."""
    return (context - condition) // 2


def partner(spec: OperatorSpec) -> str:
    """What the prompt calls a right row: the name given, or the right column's name."""
    return spec.right_name.strip() if spec.right_name else partner_name(spec.columns[1])


@dataclass(frozen=True)
class PairQuestion:
    """A pair's prompt after its left row: `lead` before the right row (the condition, where it comes
    first: computed once per left row, as its common opening), `tail` after it (the condition and
    the answer cue, or the cue alone)."""

    lead: list[int]
    tail: list[int]

    def around(self, partner: list[int]) -> list[int]:
        return self.lead + partner + self.tail

    def __len__(self) -> int:
        return len(self.lead) + len(self.tail)


def render(layout: Layout, condition: str, name: str, condition_first: bool = True) -> PairQuestion:
    """The condition's prompt around a right row named `name`: the one rendering that prediction,
    the answer store's keys and the session share."""
    if condition_first:
        return PairQuestion(layout.pair_lead(condition, name), layout.cue)
    return PairQuestion([], layout.pair_question(condition, name))


def keys(key: Key, condition: PairQuestion, anchors: list[list[int]], partners: list[list[int]],
         calibrated: bool, pairs: list[list[int]] | None = None) -> list[list[bytes]]:
    """The answer store's keys of each pair's raw P(yes): per left row, one per right row it asks
    (`pairs`: their indices; None: every one). A pair's document: the left row's tokens, -1, the
    right row's. The two layouts' keys differ by the lead."""
    words = [condition.lead, condition.tail] if condition.lead else [condition.tail]
    asked = "\x1f".join(["join", calibration_word(calibrated), *map(str, words)])
    rows = pairs if pairs is not None else [range(len(partners))] * len(anchors)
    return [[key(asked, a + [-1] + partners[j]) for j in row] for a, row in zip(anchors, rows)]


class JoinSettings(Settings):
    kind: ClassVar[str] = "join"
    question_word: ClassVar[str] = "condition"
    cascade_metrics: ClassVar[tuple[str, ...]] = METRICS  # over pairs
    left: Name
    right: Name
    left_column: Name
    right_column: Name
    condition: Texts
    right_name: object = None  # any value, for check's message to name it
    threshold: Number = 0.5
    top_k: Count = None
    recall_target: MaybeNumber = None
    recall_delta: Number = 0.05
    candidates: Count = None
    embedding: Text = None
    condition_first: Flag = True  # bench/results/join-layout-heldout.md: better answers for 0.4x the tokens
    calibration: Calibration = "auto"
    cascade: CascadeSetting = None  # on each pair's P(yes)

    def spec(self, name: str, output: str | None) -> OperatorSpec:
        return OperatorSpec(name, self.kind, (self.left, self.right), (self.left_column, self.right_column),
                            self.condition, threshold=self.threshold, top_k=self.top_k,
                            recall_target=self.recall_target, recall_delta=self.recall_delta,
                            candidates=self.candidates, embedding=self.embedding,
                            condition_first=self.condition_first,
                            right_name=cast("str | None", self.right_name), calibration=self.calibration,
                            cascade=self.cascade, output=output)

    @classmethod
    def body(cls, spec: OperatorSpec) -> dict:
        return {"left": spec.inputs[0], "right": spec.inputs[1], "left_column": spec.columns[0],
                "right_column": spec.columns[1], "condition": spec.questions, "right_name": spec.right_name,
                "threshold": spec.threshold, "top_k": spec.top_k, "recall_target": spec.recall_target,
                "recall_delta": spec.recall_delta, "candidates": spec.candidates, "embedding": spec.embedding,
                "condition_first": spec.condition_first,
                "calibration": spec.calibration, "cascade": spec.cascade}

    def questions(self) -> tuple[str, ...]:
        return self.condition

    def check(self, flags: dict[str, str]) -> None:
        super().check(flags)
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")
        check_blocking(self.recall_target, self.recall_delta, self.candidates, self.embedding)
        name = self.right_name
        if name is None:
            return
        if not isinstance(name, str) or not name.strip() or "\n" in name or ":" in name:
            raise ValueError(f"right_name must be a short name on one line, such as \"headline\", got {name!r}")
        if name.strip().lower() == ANCHOR:
            raise ValueError(f"right_name {name!r} is what the prompt calls the left row; name the right rows "
                             f"otherwise (\"second document\")")


def asked_share(spec: OperatorSpec, left: int, right: int) -> float:
    """The share of the product a join is expected to ask before any pair is: every pair, or a
    blocked join's (a recall target's as planner/recall.py predicts it; candidates and their sample;
    a top-k target's sample of left rows asked about every right row, and k candidates a row)."""
    pairs, rows = left * right, max(left, right)
    if not pairs or (spec.recall_target is None and spec.candidates is None):
        return 1.0
    if spec.recall_target is not None and spec.top_k is not None:
        sampled = min(left, sample_size(left, (1 - spec.recall_target) * left, TOP_K_SLACK, spec.recall_delta))
        return min(1.0, (sampled * right + (left - sampled) * min(spec.top_k, right)) / pairs)
    if spec.candidates is not None:
        chosen = left * min(spec.candidates, right)
        return (chosen + min(pairs - chosen, math.ceil(FIRST_CUT * rows))) / pairs
    return predict_blocked(pairs, rows, spec.recall_target or 1.0, spec.recall_delta) / pairs


def reads_vectors(spec: OperatorSpec) -> bool:
    """Whether a join reads each of its rows for the model's own vectors: a blocked join that names
    no embedding model."""
    return (spec.recall_target is not None or spec.candidates is not None) and spec.embedding is None


def ranked(p_yes: list[float], threshold: float, top_k: int | None,
           right: list[int] | None = None) -> list[tuple[int, float]]:
    """One left row's right rows (index, P(yes)) at or above the threshold, best first, ties in
    right row order; the first `top_k` of them if given. `right`: the right rows `p_yes` answers
    (None: every one, in order)."""
    kept = sorted(((j, p) for j, p in zip(right or range(len(p_yes)), p_yes) if p >= threshold),
                  key=lambda jp: (-jp[1], jp[0]))
    return kept[:top_k] if top_k is not None else kept


def check_blocking(target: float | None, delta: float, candidates: int | None, embedding: str | None) -> None:
    """A blocked join's settings: a recall target certified at a level (over the product, or over
    the left rows' top_k), or each left row's best candidates; never both."""
    if target is not None and not 0 < target <= 1:  # NaN too
        raise ValueError(f"recall_target must be in (0, 1], got {target}")
    if not 0 < delta < 1:
        raise ValueError(f"recall_delta must be in (0, 1), got {delta}")
    if candidates is not None and candidates < 1:
        raise ValueError(f"candidates must be at least 1, got {candidates}")
    if target is not None and candidates is not None:
        raise ValueError("recall_target and candidates are two ways to choose the pairs asked: give one")
    if embedding is not None and target is None and candidates is None:
        raise ValueError("embedding scores the pairs a blocked join asks: give recall_target or candidates too")
    if embedding is not None and not embedding.strip():
        raise ValueError("embedding must name a sentence-transformers model, got an empty name")


class Join(OperatorKind):
    name = "join"
    summary = "pairs of left and right rows that satisfy a condition"
    arity = 2
    keeps_rows = False
    anchor = "left_row"
    settings = JoinSettings

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("left")
        p.add_argument("right")
        p.add_argument("--left-column", required=True)
        p.add_argument("--right-column", required=True)
        p.add_argument("--right-name", help="what the prompt calls a right row (\"headline\"); by default the "
                                            "right column's name (the left row is \"the document\")")
        p.add_argument("--condition", required=True)
        p.add_argument("--threshold", type=float, default=0.5, help="the least P(yes) a pair needs")
        p.add_argument("--top-k", type=int, help="each left row's K right rows of highest P(yes) (at least "
                                                 "--threshold), ranked")
        p.add_argument("--recall-target", type=float, metavar="R",
                       help="ask the model about few pairs, chosen by the rows' vectors, and certify that the output "
                            "holds at least R of the pairs it would match if asked about every pair")
        p.add_argument("--recall-delta", type=float, default=0.05, metavar="D",
                       help="the certificate holds with probability at least 1 - D (default 0.05)")
        p.add_argument("--candidates", type=int, metavar="K",
                       help="ask about each left row's K best-scoring right rows only; the recall is estimated "
                            "from a sample, not certified")
        p.add_argument("--condition-first", action=argparse.BooleanOptionalAction, default=True,
                       help="ask the condition before each right row, so that a left row's pairs share its KV "
                            "and each pair costs its right row and the answer cue (the default); "
                            "--no-condition-first asks it after each pair")
        p.add_argument("--embedding", metavar="MODEL",
                       help="score pairs with this sentence-transformers model (a folder, or all-MiniLM-L6-v2 "
                            "when installed) instead of the model's own hidden states")

    def from_args(self, args: argparse.Namespace) -> tuple[dict[str, str], OperatorSpec]:
        settings = JoinSettings.parse({"left": "left", "right": "right", "left_column": args.left_column,
                                       "right_column": args.right_column, "right_name": args.right_name,
                                       "condition": args.condition, "threshold": args.threshold, "top_k": args.top_k,
                                       "recall_target": args.recall_target, "recall_delta": args.recall_delta,
                                       "candidates": args.candidates, "embedding": args.embedding,
                                       "condition_first": args.condition_first,
                                       "calibration": args.calibration, "cascade": cascade_from_args(args)}, "join",
                                      {"questions": "--condition"})
        return {"left": args.left, "right": args.right}, settings.spec("join", args.output)

    def tokens(self, layout: Layout, spec: OperatorSpec, docs: list[list[int]],
               partners: list[str]) -> OperatorTokens:
        name = partner(spec)
        condition = render(layout, spec.questions[0], name, spec.condition_first)
        rendered = [condition.around(p) for p in layout.partners(partners, name)]
        return OperatorTokens(docs, [len(condition)], partners=[len(p) - len(condition) for p in rendered],
                              stem=stem(rendered), asked=asked_share(spec, len(docs), len(partners)))

    def document_room(self, t: OperatorTokens, context: int) -> int:
        return pair_room(context, t.questions[0])

    def prompts(self, t: OperatorTokens, selectivity: float | None) -> tuple[list[tuple[float, int]], int]:
        return [(t.asked, n_partner + t.questions[0]) for n_partner in t.partners], t.stem

