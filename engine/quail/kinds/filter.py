"""filter: keep the rows for which every predicate holds (chain mode asks the next predicate only
of rows that passed the previous one)."""

import argparse

from quail.errors import QuailError
from quail.kinds.base import (OperatorKind, calibration_setting, cascade_setting, count_setting, flag_setting,
                              name_setting, number_setting, texts_setting)
from quail.planner.specs import Cascade, OperatorSpec


class Filter(OperatorKind):
    name = "filter"
    summary = "keep the rows for which every predicate holds"
    narrows = True
    keys = frozenset({"input", "column", "predicates", "threshold", "limit", "keep_all", "calibration", "cascade"})
    question_word = "predicate"

    def from_settings(self, name, body, output):
        where = f"operator {name!r}"
        return OperatorSpec(name, self.name, (name_setting(body, "input", where, self.name),),
                            (name_setting(body, "column", where, self.name),),
                            texts_setting(body, "predicates", where, self.name),
                            threshold=number_setting(body, "threshold", where, 0.5),
                            limit=count_setting(body, "limit", where), keep_all=flag_setting(body, "keep_all", where),
                            calibration=calibration_setting(body, where), cascade=cascade_setting(body, where),
                            output=output)

    def add_arguments(self, p):
        p.add_argument("input")
        p.add_argument("--text-column", required=True)
        p.add_argument("--predicate", action="append", default=[], help="a yes/no question; repeat for several")
        p.add_argument("--keep-all", action="store_true", help="keep every row, adding passed and p_yes_1..k")
        p.add_argument("--limit", type=int, help="the first N passing rows, in input order")
        p.add_argument("--threshold", type=float, default=0.5)
        p.add_argument("--cascade", metavar="MODEL", help="a larger model for the rows whose P(yes) lies inside "
                                                          "--cascade-band (`quail band` chooses it)")
        p.add_argument("--cascade-band", type=float, nargs=2, metavar=("LOW", "HIGH"))

    def from_args(self, args: argparse.Namespace):
        if not args.predicate:
            raise QuailError("--predicate: give at least one predicate")
        for i, p in enumerate(args.predicate, 1):
            if not p.strip():
                raise QuailError(f"--predicate {i} is empty")
        if args.limit is not None and args.limit < 1:
            raise QuailError(f"--limit must be at least 1, got {args.limit}")
        if (args.cascade is None) != (args.cascade_band is None):
            raise QuailError("--cascade MODEL and --cascade-band LOW HIGH go together")
        cascade = Cascade(args.cascade, *args.cascade_band) if args.cascade else None
        return {"input": args.input}, OperatorSpec(
            "filter", self.name, ("input",), (args.text_column,), tuple(args.predicate), threshold=args.threshold,
            limit=args.limit, keep_all=args.keep_all, calibration=args.calibration, cascade=cascade,
            output=args.output)

    def check_cascade(self, spec, where):
        c = spec.cascade
        if c is not None:
            if not c.model.strip():
                raise QuailError(f"{where}: cascade: name the larger model")
            if not 0.0 <= c.low <= c.high <= 1.0:
                raise QuailError(f"{where}: cascade band [{c.low}, {c.high}] must be LOW <= HIGH within [0, 1]")

    def check_limit(self, spec, where):
        if spec.limit is not None and spec.limit < 1:
            raise QuailError(f"{where}: limit must be a positive number of rows, on a filter")

    def compute(self, session, spec, inputs, reuse, retain, truncate, progress):
        import pyarrow as pa

        [(texts, rows)] = inputs
        if spec.cascade is None:
            r, stats = session.filter(texts, list(spec.questions), spec.threshold, spec.limit, reuse, retain,
                                      truncate, progress, rows, spec.calibration)
            calibrated = session.calibrating(spec.calibration)
        else:  # every row of the window is answered: the output keeps the first `limit` that passed
            from quail.cascade import cascade_filter

            r, escalated, stats = cascade_filter(session, spec.cascade, texts, list(spec.questions), spec.threshold,
                                                 reuse, retain, truncate, progress, rows, spec.calibration)
            calibrated = any(s.calibrating(spec.calibration) for s in (session, session.peer(spec.cascade.model)))
        columns = {"row": pa.array(rows[: len(r.passed)], pa.int64()), "passed": pa.array(r.passed, pa.bool_())}
        # p_yes_k per predicate, and p_yes_raw_k, before calibration, where it was on
        for k in range(len(spec.questions)):
            columns[f"p_yes_{k + 1}"] = pa.array([p[k] for p in r.p_yes], pa.float64())
        if spec.cascade is not None:
            columns["cascaded"] = pa.array(escalated, pa.bool_())  # the larger model answered the row
        if calibrated:
            for k in range(len(spec.questions)):
                columns[f"p_yes_raw_{k + 1}"] = pa.array([p[k] for p in r.raw_p_yes], pa.float64())
        return pa.table(columns), stats

    def shape(self, spec, answers, tables, source):
        import pyarrow as pa
        import pyarrow.compute as pc

        from quail.pipeline.outputs import scatter

        [table] = tables
        passed = pc.filter(answers.column("row"), answers.column("passed")).to_pylist()[: spec.limit]
        if not spec.keep_all:
            return table.take(pa.array(passed, pa.int64()))
        names = [n for n in answers.column_names if n != "row"]  # as computed: the worker resolved "auto"
        out = scatter(answers, table.num_rows, names, source, table)
        if spec.limit is not None and len(passed) == spec.limit:
            out = out.slice(0, passed[-1] + 1)  # the rows up to the N-th passing one
        return out

    def asks_more_than_once(self, spec):
        return len(spec.questions) > 1

    def counted_rows(self, answers):
        import pyarrow.compute as pc

        return int(pc.sum(answers.column("passed")).as_py() or 0)

    def observed(self, spec, answers):
        if spec.limit is not None:  # a limit stops early: what it saw is no sample of the table
            return None
        return answers.num_rows, self.counted_rows(answers)

    def tokens(self, layout, spec, docs, partners):
        from quail.planner.predict import OperatorTokens
        from quail.planner.prefix_tree import stem

        questions = [layout.yes_no_question(q) for q in spec.questions]
        return OperatorTokens(docs, [len(q) for q in questions], stem=stem(questions))

    def prompts(self, t, selectivity):
        per = selectivity ** (1 / len(t.questions))
        return [(per**j, q) for j, q in enumerate(t.questions)], t.stem
