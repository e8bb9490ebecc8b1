"""classify: label each row with one of the given labels, each scored on the one document+question
state (multi-token labels by teacher forcing on top of it)."""

from quail.errors import QuailError
from quail.kinds.base import OperatorKind, OperatorTokens, calibration_setting, name_setting, texts_setting
from quail.kinds.words import DEFAULT_QUESTION
from quail.planner.specs import OperatorSpec


class Classify(OperatorKind):
    name = "classify"
    summary = "label each row with one of the given labels"
    keys = frozenset({"input", "column", "labels", "question", "calibration"})

    def from_settings(self, name, body, output):
        where = f"operator {name!r}"
        question = body.get("question") or DEFAULT_QUESTION
        if not isinstance(question, str):
            raise QuailError(f"{where}: 'question' must be text, got {question!r}")
        return OperatorSpec(name, self.name, (name_setting(body, "input", where, self.name),),
                            (name_setting(body, "column", where, self.name),), (question,),
                            texts_setting(body, "labels", where, self.name),
                            calibration=calibration_setting(body, where), output=output)

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
        return {"input": args.input}, OperatorSpec("classify", self.name, ("input",), (args.text_column,),
                                                   (args.question or DEFAULT_QUESTION,), tuple(args.label),
                                                   calibration=args.calibration, output=args.output)

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
