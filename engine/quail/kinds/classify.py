"""classify: label each row with one of the given labels, each scored on the one document+question
state (multi-token labels by teacher forcing on top of it)."""

from typing import ClassVar

from quail.errors import QuailError
from quail.kinds.base import OperatorKind, OperatorTokens
from quail.kinds.settings import Calibration, Name, Settings, Text, Texts
from quail.kinds.words import DEFAULT_QUESTION
from quail.planner.specs import OperatorSpec


class ClassifySettings(Settings):
    kind: ClassVar[str] = "classify"
    input: Name
    column: Name
    labels: Texts
    question: Text = None  # DEFAULT_QUESTION when none is given
    calibration: Calibration = "auto"

    def spec(self, name, output):
        return OperatorSpec(name, self.kind, (self.input,), (self.column,), (self.question or DEFAULT_QUESTION,),
                            self.labels, calibration=self.calibration, output=output)


class Classify(OperatorKind):
    name = "classify"
    summary = "label each row with one of the given labels"
    settings = ClassifySettings
    prompt_word = "question with its labels"

    def add_arguments(self, p):
        p.add_argument("input")
        p.add_argument("--text-column", required=True)
        p.add_argument("--label", action="append", default=[], help="a label; repeat for each")
        p.add_argument("--question", help="the question the labels answer")

    def from_args(self, args):
        if len(args.label) < 2:
            raise QuailError("--label: give at least two labels")
        for i, label in enumerate(args.label, 1):
            if not label.strip():
                raise QuailError(f"--label {i} is empty")
        dupes = sorted({label for label in args.label if args.label.count(label) > 1})
        if dupes:
            raise QuailError(f"--label: duplicate labels {dupes}")
        settings = ClassifySettings.parse({"input": "input", "column": args.text_column, "labels": args.label,
                                           "question": args.question, "calibration": args.calibration}, "classify")
        return {"input": args.input}, settings.spec("classify", args.output)

    def validate(self, spec, where):
        super().validate(spec, where)
        if len(set(spec.labels)) != len(spec.labels) or len(spec.labels) < 2:
            raise QuailError(f"{where}: give at least two distinct labels")

    def tokens(self, layout, spec, docs, partners):

        q = layout.label_question(spec.questions[0], list(spec.labels))
        return OperatorTokens(docs, [len(q)], [len(layout.label(x)) for x in spec.labels])

    def document_room(self, t, context):
        return context - t.questions[0] - max(t.labels)

    def prompts(self, t, selectivity):
        q = t.questions[0]  # every label is scored on the one document+question state
        prompts = [(1.0, q)] if min(t.labels) == 1 else []
        return prompts + [(1.0, q + n_label - 1) for n_label in t.labels if n_label > 1], q
