"""`quail filter|classify|join|extract|map` (one operator, a command per kind) and `quail pipeline`
(a pipeline file's operators in one engine session): they share the run path below, which `quail
explain` takes too, stopping at the plan."""

import argparse
import sys

from quail.cli.common import Parser, at_least, device_options, open_session, start_engine, store_options
from quail.cli.progress import Progress
from quail.cli.reads import files_read
from quail.errors import QuailError
from quail.kinds import KINDS
from quail.kinds.settings import check_cascade_model
from quail.model.registry import DEFAULT_MODEL, EMBEDDED
from quail.pipeline.config import Pipeline, check_reviews, load_pipeline
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS
from quail.specs import CALIBRATIONS
from quail.store import open_store

FLAGS, KEYS = ("--output", "--stats", "--review-output"), ("output", "stats", "review_output")


def run_options() -> Parser:
    """What every command that computes operators takes: reuse switches, inputs and windows."""
    p = Parser(add_help=False, parents=[device_options()])
    p.add_argument("--no-reuse", action="store_true", help="compute every prompt from scratch (for checks)")
    p.add_argument("--no-rewind", action="store_true", help="switch KV rewind (the seed's chain mode) off")
    p.add_argument("--no-prefix-sharing", action="store_true", help="switch prefix sharing off")
    p.add_argument("--no-retention", action="store_true", help="keep no KV for later operators")
    p.add_argument("--no-borrowing", action="store_true", help="admission never takes retained KV's pages")
    p.add_argument("--no-answer-store", action="store_true",
                   help="neither look answers up in the answer store nor keep new ones (`quail answers`)")
    store_options(p)
    p.add_argument("--on-null", choices=["fail", "skip"], default="fail", help="NULL or empty text")
    p.add_argument("--truncate", action="store_true", help="cut documents longer than the model's context")
    p.add_argument("--window-rows", type=at_least(1), default=DEFAULT_WINDOW_ROWS,
                   help="rows read, computed and written at a time: memory follows this, not the table")
    p.add_argument("--max-tokens", type=at_least(1, 2**63 - 1), default=None,
                   help="the tokens each operator may compute (a pipeline operator's max_tokens: wins): a plan "
                        "that predicts more is refused before the model computes, and a run that computes more "
                        "stops at that window with no output")
    return p


def _single_options() -> Parser:
    """What a one-operator command adds to its kind's own arguments."""
    p = Parser(add_help=False)
    p.add_argument("--output", help="output Parquet file (written atomically); required unless --explain")
    p.add_argument("--stats", help="write the token accounting to this JSON file")
    p.add_argument("--cascade", metavar="MODEL", help="a larger model for the rows (a join's pairs) the model is "
                                                      "unsure of: inside --cascade-band, or a band chosen for "
                                                      "--cascade-target")
    p.add_argument("--cascade-band", type=float, nargs=2, metavar=("LOW", "HIGH"),
                   help="the band, by hand, on P(yes) (a classify: on its top label's probability; `quail band` "
                        "helps choose a filter's)")
    p.add_argument("--cascade-target", metavar="METRIC=T",
                   help="precision=T, recall=T or accuracy=T (a classify: accuracy) against the larger model, with "
                        "probability at least 1 - --cascade-delta: the band is chosen on a sample of the first window")
    p.add_argument("--cascade-delta", type=float, default=0.05, help="the chance the target is missed")
    p.add_argument("--cascade-sample", type=int, default=400,
                   help="rows (a join: pairs) of the first window the larger model labels to choose the band")
    p.add_argument("--review-output", help="with a cascade: write the rows inside its band (the larger model "
                                           "answered them), with their probabilities, to this Parquet file")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"{', '.join(EMBEDDED)}, a .gguf file or a HF directory")
    p.add_argument("--explain", action="store_true", help="print the plan and predicted accounting; run nothing")
    p.add_argument("--calibration", choices=CALIBRATIONS, default="auto",
                   help="contextual: divide out each question's answer on content-free documents; auto (the "
                        "default): the one measured best for the model (contextual for qwen2.5-coder-1.5b)")
    return p


def pipeline_parser(sub: argparse._SubParsersAction, name: str, text: str) -> Parser:
    """`quail NAME PIPELINE.yaml`, with the run options."""
    p = sub.add_parser(name, help=text, description=text, parents=[run_options()])
    p.add_argument("pipeline", help="PIPELINE.yaml")
    p.add_argument("--model", help="overrides the pipeline's model")
    return p


def add_parser(sub: argparse._SubParsersAction) -> None:
    """A command per operator kind, then `pipeline`."""
    run, single = run_options(), _single_options()
    for kind in KINDS.values():
        p = sub.add_parser(kind.name, help=kind.summary, description=kind.summary, parents=[single, run])
        kind.add_arguments(p)
        p.set_defaults(func=_one_operator)
    pipeline_parser(sub, "pipeline", "run the operators of a pipeline file in one engine session") \
        .set_defaults(func=_pipeline)


def _pipeline(args: argparse.Namespace) -> None:
    compute(args, from_file(args), explain=False, words=KEYS)


def _one_operator(args: argparse.Namespace) -> None:
    """A one-operator pipeline from a filter, classify, join, extract or map command."""
    tables, spec = KINDS[args.command].from_args(args)
    if not args.explain and not args.output:
        raise QuailError("--output is required (or --explain)")
    stats = {spec.name: args.stats} if args.stats else {}
    pipeline = Pipeline(tables, [spec], args.model, stats, reviews={spec.name: args.review_output}
                        if getattr(args, "review_output", None) else {})
    check_reviews(pipeline)
    compute(args, pipeline, args.explain, FLAGS)


def from_file(args: argparse.Namespace) -> Pipeline:
    """The pipeline file's pipeline, on --model if given."""
    pipeline = load_pipeline(args.pipeline)
    pipeline.model = args.model or pipeline.model
    return pipeline


def compute(args: argparse.Namespace, pipeline: Pipeline, explain: bool, words: tuple[str, str, str]) -> None:
    """Plans and runs the pipeline, or prints its plan (explain). words: what the command calls an
    operator's output, stats and review output, in errors."""
    start_engine(args, f"`quail {args.command}`")
    from quail.cost.observed import SelectivityCounts, WrittenCounts
    from quail.model.loader import check_available
    from quail.pipeline.explain import describe_plan, describe_run
    from quail.pipeline.runner import Runner
    from quail.planner.plan import plan as make_plan
    from quail.reuse import Reuse

    reuse = Reuse.none() if args.no_reuse else Reuse(not args.no_rewind, not args.no_prefix_sharing,
                                                      not args.no_retention, not args.no_borrowing,
                                                      not args.no_answer_store)
    runner = Runner(pipeline, args.on_null, args.truncate, args.window_rows, args.max_tokens)
    runner.check_inputs()
    if not explain:
        runner.check_outputs(*words, kept=files_read(args, pipeline))
    plan = make_plan(pipeline.specs, SelectivityCounts().estimates(), rewind=reuse.rewind, sharing=reuse.sharing,
                     retention_on=reuse.retention, written=WrittenCounts().means())
    for spec in pipeline.specs:
        if spec.cascade is not None:
            check_cascade_model(pipeline.model, spec.cascade.model, f"operator {spec.name!r}")
            check_available(spec.cascade.model)
    session = open_session(pipeline.model, args)
    session.store = open_store(args.answer_store, args.answer_store_file) if reuse.store else None
    if explain:
        engine = session.engine
        runner.plan_windows(session, plan, reuse)
        print(describe_plan(plan, runner.predict(session, plan), engine.cost, engine.settings.arena_pages,
                            engine.pool.capacity, engine.settings.memory))
        return
    bars = []

    def progress(rows: int | None, what: str) -> Progress:
        bars.append(Progress(rows, what))
        return bars[-1]

    try:
        runs = runner.run(session, plan, reuse, progress)
    finally:
        for b in bars:
            b.close()
    for r in runs:
        print(describe_run(r.spec.name, r.stats, r.predicted, r.rows_out, target=r.spec.output), file=sys.stderr)
    if session.store is not None and session.store.unused:
        print(f"answer store {session.store.path} not in use ({session.store.unused}): no answer was looked up or "
              f"kept", file=sys.stderr)
