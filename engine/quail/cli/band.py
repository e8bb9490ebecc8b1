"""`quail band`: a cascade's band from a labelled sample. The model that will answer first runs the
filter on the sample; planner/guarantee.py picks the band that leaves it the most rows while the
target (accuracy, precision or recall) holds with probability at least 1 - --delta. The labels
may be the truth or a larger model's answers; the band holds against those."""

import argparse
from typing import TYPE_CHECKING

import pyarrow as pa

from quail.cli.common import device_options, open_session, start_engine
from quail.errors import QuailError
from quail.model.registry import DEFAULT_MODEL
from quail.pipeline.stream import TableSource
from quail.pipeline.tables import text_column
from quail.planner.guarantee import answer, choose
from quail.specs import CALIBRATIONS, METRICS

if TYPE_CHECKING:
    from quail.session import Session

TRUE, FALSE = {"yes", "true", "1"}, {"no", "false", "0"}
SUMMARY = "a filter cascade's band, from a labelled sample and a target accuracy, precision or recall"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("band", help=SUMMARY, description=f"{SUMMARY}: the band that leaves the model that "
                       "answers first the most rows while the target holds", parents=[device_options()])
    p.add_argument("sample", help="a labelled sample: Parquet or CSV")
    p.add_argument("--text-column", required=True)
    p.add_argument("--predicate", action="append", default=[], help="as the filter will ask it; repeatable")
    p.add_argument("--label-column", required=True, help="whether each row should pass: true/false, 1/0 or yes/no")
    p.add_argument("--target", type=float, required=True, help="the metric's least value, e.g. 0.95")
    p.add_argument("--metric", choices=METRICS, default="accuracy",
                   help="accuracy (default), precision or recall of the cascade's answers against the labels")
    p.add_argument("--delta", type=float, default=0.05, help="the chance the target is missed (default 0.05)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="the model that answers first")
    p.add_argument("--calibration", choices=CALIBRATIONS, default="auto",
                   help="as the filter will take it (auto, the default: the one measured best for the model)")
    p.set_defaults(func=choose_band)


def choose_band(args: argparse.Namespace) -> None:
    start_engine(args, "`quail band`")
    check(args)
    run(args, open_session(args.model, args))


def check(args: argparse.Namespace) -> None:
    """Everything that can be refused before the model loads."""
    if not args.predicate or not all(p.strip() for p in args.predicate):
        raise QuailError("--predicate: give at least one non-empty predicate")
    if not 0.0 < args.target < 1.0:
        raise QuailError(f"--target {args.target} is outside (0, 1)")
    if not 0.0 < args.delta < 1.0:
        raise QuailError(f"--delta {args.delta} is outside (0, 1)")


def labels(table: pa.Table, column: str, source: str) -> list[bool]:
    if column not in table.column_names:
        raise QuailError(f"{source}: no label column {column!r}; it has {', '.join(table.column_names)}")
    out = []
    for i, value in enumerate(table.column(column).to_pylist()):
        word = str(value).strip().lower() if value is not None and not isinstance(value, float) else None
        if isinstance(value, bool) or word in TRUE | FALSE:
            out.append(value if isinstance(value, bool) else word in TRUE)
        else:
            raise QuailError(f"{source}: row {i} of label column {column!r} is {value!r}, not true/false, 1/0 "
                             f"or yes/no")
    return out


def run(args: argparse.Namespace, session: "Session") -> None:
    source = TableSource(args.sample)
    table = source.read_all()
    truth = labels(table, args.label_column, source.name)
    texts, _ = text_column(table, args.text_column, source.name, "fail")
    if not texts:
        raise QuailError(f"{source.name}: the sample has no rows")
    # threshold 0: every predicate of every row, so that any band's chains can be replayed
    result, _ = session.filter(texts, args.predicate, 0.0, calibration=args.calibration)
    band = choose(args.metric, args.target, args.delta, result.p_yes, truth)  # type: ignore[arg-type]  # no None
    answered = sum(answer(p, band.low, band.high) is not None for p in result.p_yes)  # type: ignore[arg-type]
    print(f"{session.loaded.name} answers {answered} of {len(texts)} sample rows ({answered / len(texts):.0%}); "
          f"the rest go to the cascade model. {band.describe()}\n"
          f"--cascade-band {band.low!r} {band.high!r}")

