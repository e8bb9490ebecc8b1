"""filter: keep the rows for which every predicate holds (chain mode asks the next predicate only
of rows that passed the previous one)."""

import argparse

from typing import ClassVar

from quail.errors import QuailError
from quail.planner.guarantee import METRICS
from quail.kinds.base import OperatorKind, OperatorTokens
from quail.kinds.settings import Calibration, CascadeSetting, Count, Flag, Name, Number, Settings, Texts
from quail.planner.prefix_tree import stem
from quail.planner.specs import OperatorSpec


class FilterSettings(Settings):
    kind: ClassVar[str] = "filter"
    input: Name
    column: Name
    predicates: Texts
    threshold: Number = 0.5
    limit: Count = None
    keep_all: Flag = False
    calibration: Calibration = "auto"
    cascade: CascadeSetting = None

    def spec(self, name, output):
        return OperatorSpec(name, self.kind, (self.input,), (self.column,), self.predicates, threshold=self.threshold,
                            limit=self.limit, keep_all=self.keep_all, calibration=self.calibration,
                            cascade=self.cascade, output=output)


class Filter(OperatorKind):
    name = "filter"
    summary = "keep the rows for which every predicate holds"
    narrows = True
    settings = FilterSettings
    question_word = "predicate"

    def add_arguments(self, p):
        p.add_argument("input")
        p.add_argument("--text-column", required=True)
        p.add_argument("--predicate", action="append", default=[], help="a yes/no question; repeat for several")
        p.add_argument("--keep-all", action="store_true", help="keep every row, adding passed and p_yes_1..k")
        p.add_argument("--limit", type=int, help="the first N passing rows, in input order")
        p.add_argument("--threshold", type=float, default=0.5)
        p.add_argument("--cascade", metavar="MODEL", help="a larger model for the rows whose P(yes) lies inside "
                                                          "--cascade-band, or a band chosen for --cascade-target")
        p.add_argument("--cascade-band", type=float, nargs=2, metavar=("LOW", "HIGH"),
                       help="the band, by hand (`quail band` helps choose it)")
        p.add_argument("--cascade-target", metavar="METRIC=T",
                       help="precision=T, recall=T or accuracy=T against the larger model, with probability at "
                            "least 1 - --cascade-delta: the band is chosen on a sample of the first window")
        p.add_argument("--cascade-delta", type=float, default=0.05, help="the chance the target is missed")
        p.add_argument("--cascade-sample", type=int, default=400,
                       help="rows of the first window the larger model labels to choose the band")

    def from_args(self, args: argparse.Namespace):
        if not args.predicate:
            raise QuailError("--predicate: give at least one predicate")
        for i, p in enumerate(args.predicate, 1):
            if not p.strip():
                raise QuailError(f"--predicate {i} is empty")
        if args.limit is not None and args.limit < 1:
            raise QuailError(f"--limit must be at least 1, got {args.limit}")
        if (args.cascade is None) != (args.cascade_band is None and args.cascade_target is None) \
                or (args.cascade_band is not None and args.cascade_target is not None):
            raise QuailError("--cascade MODEL goes with one of --cascade-band LOW HIGH and --cascade-target METRIC=T")
        cascade = None
        if args.cascade_band is not None:
            cascade = {"model": args.cascade, "band": args.cascade_band}
        elif args.cascade_target is not None:
            metric, eq, value = args.cascade_target.partition("=")
            try:
                target = {metric: float(value)}
            except ValueError:
                raise QuailError(f"--cascade-target must be METRIC=T, got {args.cascade_target!r}") from None
            if not eq:
                raise QuailError(f"--cascade-target must be METRIC=T, got {args.cascade_target!r}")
            cascade = {"model": args.cascade, "target": target, "delta": args.cascade_delta,
                       "sample": args.cascade_sample}
        settings = FilterSettings.parse({"input": "input", "column": args.text_column, "predicates": args.predicate,
                                         "threshold": args.threshold, "limit": args.limit, "keep_all": args.keep_all,
                                         "calibration": args.calibration, "cascade": cascade}, "filter")
        return {"input": args.input}, settings.spec("filter", args.output)

    def check_cascade(self, spec, where):
        c = spec.cascade
        if c is not None:
            if not c.model.strip():
                raise QuailError(f"{where}: cascade: name the larger model")
            if c.target is not None:
                if c.metric not in METRICS:
                    raise QuailError(f"{where}: cascade target {c.metric!r} is not one of {', '.join(METRICS)}")
                if not 0.0 < c.target < 1.0 or not 0.0 < c.delta < 1.0:
                    raise QuailError(f"{where}: cascade target {c.target} and delta {c.delta} must each lie in (0, 1)")
                if c.sample < 1:
                    raise QuailError(f"{where}: cascade sample must be at least 1 row, got {c.sample}")
            if (c.low is None) != (c.high is None) or (c.low is None and c.target is None):
                raise QuailError(f"{where}: cascade: give a band or a target")
            if c.low is not None and not 0.0 <= c.low <= c.high <= 1.0:
                raise QuailError(f"{where}: cascade band [{c.low}, {c.high}] must be LOW <= HIGH within [0, 1]")

    def check_limit(self, spec, where):
        if spec.limit is not None and spec.limit < 1:
            raise QuailError(f"{where}: limit must be a positive number of rows, on a filter")

    def asks_more_than_once(self, spec):
        return len(spec.questions) > 1

    def tokens(self, layout, spec, docs, partners):
        questions = [layout.yes_no_question(q) for q in spec.questions]
        return OperatorTokens(docs, [len(q) for q in questions], stem=stem(questions))

    def prompts(self, t, selectivity):
        per = selectivity ** (1 / len(t.questions))
        return [(per**j, q) for j, q in enumerate(t.questions)], t.stem
