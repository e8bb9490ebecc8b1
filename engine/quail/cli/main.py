"""The `quail` command line: filter, classify and join a Parquet or CSV file; run or explain a
pipeline of several operators in one engine session; manage models."""

import argparse
import ipaddress
import os
import re
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from quail.cli import band
from quail.cli.progress import Progress
from quail.cli.reads import files_read
from quail.constants import (
    DEFAULT_CUDA_MAX_BATCH_TOKENS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_BATCH_TOKENS,
    DEFAULT_MAX_QUEUED,
    DEFAULT_PORT,
    DEVICE_HELP,
)
from quail.errors import QuailError
from quail.installed import require_engine
from quail.kinds import KINDS
from quail.kinds.settings import check_cascade_model
from quail.model.registry import DEFAULT_MODEL, DTYPE_CHOICES, EMBEDDED, installed, pull
from quail.pipeline.config import Pipeline, check_reviews, load_pipeline
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS
from quail.specs import CALIBRATIONS
from quail.store import open_store
from quail.worker.locations import check_location, is_tls, server_tls, tcp_location, unix_location
from quail.worker.tokens import check_token_path, new_token, read_token, token_from_file, write_token

if TYPE_CHECKING:
    from quail.session import Session


class _Parser(argparse.ArgumentParser):
    """Errors read as Quail's own: `quail: error: --threads must be at least 1, got 0`."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        message = re.sub(r"^argument ([^:]+): ", r"\1 ", message)
        self.exit(2, f"quail: error: {message}\n")


def at_least(low: int, high: int = 2**31 - 1) -> Callable[[str], int]:
    """An argparse type: a whole number within [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}" if value < low else
                                             f"must be at most {high}, got {value}")
        return value
    return parse


HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def host(text: str) -> str:
    """An argparse type: an IPv4 or IPv6 address, or a host name."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        if not HOST_NAME.fullmatch(text) or len(text) > 253:
            raise argparse.ArgumentTypeError(f"must be a host name or an IP address, got {text!r}") from None
    return text


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def _device_options() -> "_Parser":
    p = _Parser(add_help=False)
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                   help="auto: bfloat16 on a GPU or an AMX CPU, float32 on other CPUs (faster there)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--arena-pages", type=at_least(1),
                   help="KV arena size in 16-token pages (default: sized from the device's memory on a GPU, "
                        "1 GiB of KV on a CPU)")
    p.add_argument("--gpu-memory-utilization", type=float, default=DEFAULT_GPU_MEMORY_UTILIZATION,
                   help="the share of the device's free memory after the weights that the arena and one "
                        "pass's activations may take")
    p.add_argument("--max-batch-tokens", type=at_least(16),
                   help=f"most tokens in one forward pass (default: {DEFAULT_MAX_BATCH_TOKENS:,} on a CPU, "
                        f"{DEFAULT_CUDA_MAX_BATCH_TOKENS:,} on CUDA)")
    p.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads (default: all cores)")
    return p


def _store_options(p: argparse.ArgumentParser, more: str = "") -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--answer-store", metavar="PATH|URL",
                       help="the answer store: a path (SQLite; default answers.sqlite in $QUAIL_HOME), or a "
                            "postgresql+psycopg://USER@HOST:PORT/DB URL, its password by PGPASSWORD or PGPASSFILE; "
                            "default $QUAIL_ANSWER_STORE" + more)
    where.add_argument("--answer-store-file", metavar="FILE",
                       help="a file, readable by its owner alone, that holds the store's URL with its password "
                            "(default $QUAIL_ANSWER_STORE_FILE)")


def _run_options() -> "_Parser":
    """What every command that computes operators takes: reuse switches, inputs and windows."""
    p = _Parser(add_help=False, parents=[_device_options()])
    p.add_argument("--no-reuse", action="store_true", help="compute every prompt from scratch (for checks)")
    p.add_argument("--no-rewind", action="store_true", help="switch chain mode (KV rewind) off")
    p.add_argument("--no-prefix-sharing", action="store_true", help="switch prefix sharing off")
    p.add_argument("--no-retention", action="store_true", help="keep no KV for later operators")
    p.add_argument("--no-borrowing", action="store_true", help="admission never takes retained KV's pages")
    p.add_argument("--no-answer-store", action="store_true",
                   help="neither look answers up in the answer store nor keep new ones (`quail answers`)")
    _store_options(p)
    p.add_argument("--on-null", choices=["fail", "skip"], default="fail", help="NULL or empty text")
    p.add_argument("--truncate", action="store_true", help="cut documents longer than the model's context")
    p.add_argument("--window-rows", type=at_least(1), default=DEFAULT_WINDOW_ROWS,
                   help="rows read, computed and written at a time: memory follows this, not the table")
    p.add_argument("--max-tokens", type=at_least(1, 2**63 - 1), default=None,
                   help="the tokens each operator may compute (a pipeline operator's max_tokens: wins): a plan "
                        "that predicts more is refused before the model computes, and a run that computes more "
                        "stops at that window with no output")
    return p


def _single_options() -> "_Parser":
    """What a one-operator command (filter, classify, join) adds."""
    p = _Parser(add_help=False)
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


def _open_session(model: str, args: argparse.Namespace, say: Callable[[str], None] | None = None) -> "Session":
    from quail.session import Session

    return Session.open(model, args.dtype, args.arena_pages, args.max_batch_tokens, args.device,
                        args.gpu_memory_utilization, say)


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="quail", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    device, run, single = _device_options(), _run_options(), _single_options()

    for kind in KINDS.values():
        p = sub.add_parser(kind.name, help=kind.summary, parents=[single, run])
        kind.add_arguments(p)

    for name, text in (("pipeline", "run the operators of a pipeline file in one engine session"),
                       ("explain", "print a pipeline's plan and predicted token accounting; run nothing")):
        p = sub.add_parser(name, help=text, parents=[run])
        p.add_argument("pipeline", help="PIPELINE.yaml")
        p.add_argument("--model", help="overrides the pipeline's model")

    b = sub.add_parser("band", help="a filter cascade's band, from a labelled sample and a target accuracy",
                       parents=[device])
    band.add_arguments(b)
    b.add_argument("--model", default=DEFAULT_MODEL, help="the model that answers first")
    b.add_argument("--calibration", choices=CALIBRATIONS, default="auto")

    w = sub.add_parser("worker", help="the long-lived worker that Airflow tasks send jobs to", parents=[device])
    w.add_argument("action", choices=["serve", "status", "stop"],
                   help="stop: the local workers that tasks or the demo started on demand")
    w.add_argument("--model", default=DEFAULT_MODEL)
    w.add_argument("--host", type=host, default="127.0.0.1", help="listen here (default: loopback only)")
    w.add_argument("--port", type=at_least(1, 65535), default=DEFAULT_PORT)
    w.add_argument("--socket", help="listen on (or, for status, talk to) this Unix socket instead")
    w.add_argument("--all", action="store_true", help="status: one line per worker, with its load: the local "
                                                      "workers this user started, and each --worker")
    w.add_argument("--worker", action="append", default=[], metavar="LOCATION",
                   help="status --all: also this worker (grpc://HOST:PORT, with the token given); repeatable")
    w.add_argument("--token-file", help="a file (mode 0600) holding the bearer token clients must send; default: "
                                        "$QUAIL_WORKER_TOKEN, else a random one written beside the socket, or "
                                        "under $QUAIL_HOME/worker for a port, for this user only")
    w.add_argument("--tls-cert", metavar="PEM", help="serve: TLS with this certificate chain (grpc+tls://HOST:PORT), "
                                                     "required off loopback: it names the host clients reach")
    w.add_argument("--tls-key", metavar="PEM", help="serve: the certificate's private key, a file (mode 0600)")
    w.add_argument("--tls-ca", metavar="PEM", help="status: trust the worker's certificate if this authority "
                                                   "signed it (default: the system's); implies grpc+tls")
    w.add_argument("--ttl", type=seconds, default=3600.0, help="seconds finished results are kept")
    w.add_argument("--idle-timeout", type=seconds, help="exit after this many seconds without calls or work")
    w.add_argument("--no-answer-store", action="store_true", help="keep no answers across jobs and restarts")
    _store_options(w, "; a pool of workers shares one database")
    w.add_argument("--max-jobs", type=at_least(1), default=8,
                   help="jobs computed at once, batched into the same passes")
    w.add_argument("--max-queued", type=at_least(1), default=DEFAULT_MAX_QUEUED,
                   help="unfinished jobs one DAG may hold (4 times this for all); beyond, a submission waits")

    a = sub.add_parser("answers", help="the answer store: what it holds, or empty it")
    a.add_argument("action", choices=["stats", "clear"])
    _store_options(a)

    m = sub.add_parser("models", help="list or install the embedded models")
    m.add_argument("action", choices=["list", "pull"])
    m.add_argument("name", nargs="?", choices=list(EMBEDDED))
    return ap


def _single(args: argparse.Namespace) -> Pipeline:
    """A one-operator pipeline from a filter, classify or join command."""
    tables, spec = KINDS[args.command].from_args(args)
    if not args.explain and not args.output:
        raise QuailError("--output is required (or --explain)")
    stats = {spec.name: args.stats} if args.stats else {}
    pipeline = Pipeline(tables, [spec], args.model, stats, reviews={spec.name: args.review_output}
                        if getattr(args, "review_output", None) else {})
    check_reviews(pipeline)
    return pipeline


def _models(args: argparse.Namespace) -> None:
    if args.action == "list":
        for name in EMBEDDED:
            mark = "installed" if installed(name) else "not installed"
            print(f"{name}\t{mark}{'  (default)' if name == DEFAULT_MODEL else ''}")
        return
    if args.name is None:
        raise QuailError("quail models pull NAME: name a model")
    pull(args.name)


def _whole_table(job: dict) -> str:
    """Where a window's job stands in its operator's whole table."""
    if job["table_rows"] is None:
        return ""
    done = job["first_row"] + job["rows_done"]
    eta = f", about {job['eta_seconds']:,.0f} s left" if job["eta_seconds"] is not None else ""
    return f"  table: {done:,}/{job['table_rows']:,} rows ({100 * done / max(job['table_rows'], 1):.0f}%){eta}"


def _describe_worker(info: dict) -> str:
    m, gib = info["memory"], 1 << 30
    memory = (f"{m['device']}: {m['memory_free'] / gib:.1f} of {m['memory_total'] / gib:.1f} GiB free after "
              f"{m['weights_bytes'] / gib:.2f} GiB of weights, reserve {m['reserve_bytes'] / gib:.2f} GiB; "
              f"arena {info['arena_pages']:,} pages ({m['rule']})") if m else \
        f"{info['device']}: arena {info['arena_pages']:,} pages"
    cascades = f"; cascade models loaded: {', '.join(info['cascade_models'])}" if info["cascade_models"] else ""
    return (f"{info['model']} ({info['dtype']}: {info.get('dtype_why') or 'given'}; attention {info['attention']}: "
            f"{info['attention_why']}) on {memory}, "
            f"{info['free_pages']:,} free, {info['retained_pages']:,} retained; {info['max_batch_tokens']:,} tokens "
            f"a pass; answers in {info.get('answer_store') or 'no store'}{cascades}")


def _describe_load(location: str, token: str | None, tls_ca: str | None = None) -> str:
    """One worker's line in `status --all`."""
    from quail.worker.client import WorkerClient, describe_load

    try:
        return f"{location}  {describe_load(WorkerClient(location, token, timeout=5, tls_ca=tls_ca).info())}"
    except QuailError as e:
        return f"{location}  does not answer: {e}"


def _resolved(host: str) -> str:
    """The address a --host names (a name resolves to its first address; one that does not, to none
    that is loopback)."""
    try:
        return str(socket.getaddrinfo(host, None)[0][4][0])
    except OSError:
        return "0.0.0.0"


def _threads(args: argparse.Namespace) -> int:
    return args.threads or os.cpu_count() or 1


def _worker_token(args: argparse.Namespace) -> str | None:
    """The token given: --token-file, else $QUAIL_WORKER_TOKEN."""
    return token_from_file(args.token_file) if args.token_file else os.environ.get("QUAIL_WORKER_TOKEN") or None


def _worker(args: argparse.Namespace) -> None:
    if args.action == "stop":
        from quail.worker.local import stop_local_workers

        stopped = stop_local_workers()
        print(f"stopped {len(stopped)} local worker(s)" + (f": pid {', '.join(map(str, stopped))}" if stopped else ""))
        return
    if args.action == "status" and args.all:
        from quail.worker.local import local_workers

        token = _worker_token(args)
        for location in args.worker:
            check_location(location)
        for location, local_token in local_workers():
            print(_describe_load(location, local_token))
        for location in args.worker:
            print(_describe_load(location, token or read_token(location), args.tls_ca if is_tls(location) else None))
        return
    if args.worker:
        raise QuailError("--worker is for `quail worker status --all`")
    tls = server_tls(args.tls_cert, args.tls_key) if args.action == "serve" else None
    if args.socket and (tls or args.tls_ca):
        raise QuailError("TLS is for a TCP worker (--host, --port); a Unix socket admits its owner only")
    scheme = "grpc+tls" if tls or args.tls_ca else "grpc"
    location = unix_location(Path(args.socket).resolve()) if args.socket else tcp_location(scheme, args.host, args.port)
    if args.action == "status":
        from quail.worker.client import WorkerClient

        client = WorkerClient(location, _worker_token(args) or read_token(location), tls_ca=args.tls_ca)
        print(_describe_worker(client.info()))
        for job in client.status():
            stats = job["stats"] or {}
            print(f"{job['ref'][:12]}  {job['identity']['dag_id']}/{job['identity']['run_id']}/"
                  f"{job['identity']['task_id']}  {job['state']:<9} {job['rows_done']}/{job['rows']} rows  "
                  f"{job['tokens_per_second']:,.0f} tok/s  "
                  f"computed {stats.get('tokens_computed', job['tokens_computed']):,}"
                  + _whole_table(job))
        return

    require_engine("`quail worker serve`")
    import torch

    from quail.worker.liveness import check_pid_path, hold, release
    from quail.worker.server import Worker, claim_location

    # before the model loads, and before a stale socket is removed: a file at its pid or token path
    # that no worker of this user wrote, or a live worker's location, is refused at once
    check_pid_path(location)
    given = _worker_token(args)
    if not given:
        check_token_path(location)
    claim_location(location)
    alive = hold(location)
    torch.set_num_threads(_threads(args))
    # each start-up phase on its own line: the hook that started this worker logs them in the task's log
    session = _open_session(args.model, args, lambda m: print(f"quail worker: {m}", file=sys.stderr, flush=True))
    session.store = None if args.no_answer_store else \
        open_store(args.answer_store, args.answer_store_file, args.max_jobs)
    token = given or new_token()
    server = Worker(session, location, token, args.ttl, args.idle_timeout, args.max_jobs, tls, args.max_queued)
    if not args.socket and not tls and not ipaddress.ip_address(_resolved(args.host)).is_loopback:
        print(f"quail worker: WARNING: {location} serves beyond this host without TLS: whoever can reach or "
              f"take over the port sees the token and the documents; give --tls-cert and --tls-key "
              f"(docs/deploying.md, \"TLS\")", file=sys.stderr, flush=True)
    if not given:
        write_token(location, token)
    signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
    print(f"quail worker: {session.loaded.name} on {location}; {session.engine.plan.memory.describe()}",  # type: ignore[union-attr]
          file=sys.stderr, flush=True)
    server.serve()
    server.drain()
    release(alive, location)


def run(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "models":
        _models(args)
        return 0
    if args.command == "answers":
        store = open_store(args.answer_store, args.answer_store_file)
        if args.action == "clear":
            if not store.stats()["writable"]:
                raise QuailError(f"the answer store {store.path} cannot be written (read-only, unreachable or of "
                                 f"a newer schema): nothing was removed")
            print(f"removed {store.clear():,} answers from {store.path}")
        else:
            s = store.stats()
            print(f"{s['path']}: {s['answers']:,} answers, {s['bytes']:,} bytes of {s['max_bytes']:,}"
                  + ("" if s["writable"] else " (read-only)"))
        return 0
    if args.command == "worker":
        _worker(args)
        return 0
    if args.command == "band":
        require_engine("`quail band`")
        import torch

        band.check(args)
        torch.set_num_threads(_threads(args))
        band.run(args, _open_session(args.model, args))
        return 0
    if args.command in ("pipeline", "explain"):
        pipeline = load_pipeline(args.pipeline)
        pipeline.model = args.model or pipeline.model
        explain = args.command == "explain"
    else:
        pipeline = _single(args)
        explain = args.explain
    require_engine(f"`quail {args.command}`")
    import torch

    from quail.cost.observed import SelectivityCounts, WrittenCounts
    from quail.model.loader import check_available
    from quail.pipeline.explain import describe_plan, describe_run
    from quail.pipeline.runner import Runner
    from quail.planner.plan import plan as make_plan
    from quail.reuse import Reuse

    torch.set_num_threads(_threads(args))
    reuse = Reuse.none() if args.no_reuse else Reuse(not args.no_rewind, not args.no_prefix_sharing,
                                                      not args.no_retention, not args.no_borrowing,
                                                      not args.no_answer_store)
    runner = Runner(pipeline, args.on_null, args.truncate, args.window_rows, args.max_tokens)
    runner.check_inputs()
    if not explain:
        runner.check_outputs(*(("output", "stats", "review_output") if args.command in ("pipeline", "explain")
                               else ("--output", "--stats", "--review-output")), kept=files_read(args, pipeline))
    plan = make_plan(pipeline.specs, SelectivityCounts().estimates(), rewind=reuse.rewind, sharing=reuse.sharing,
                     retention_on=reuse.retention, written=WrittenCounts().means())
    for spec in pipeline.specs:
        if spec.cascade is not None:
            check_cascade_model(pipeline.model, spec.cascade.model, f"operator {spec.name!r}")
            check_available(spec.cascade.model)
    session = _open_session(pipeline.model, args)
    session.store = open_store(args.answer_store, args.answer_store_file) if reuse.store else None
    if explain:
        engine = session.engine
        runner.plan_windows(session, plan, reuse)
        print(describe_plan(plan, runner.predict(session, plan), engine.cost, engine.plan.arena_pages,
                            engine.pool.capacity, engine.plan.memory))
        return 0
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
    return 0


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that cleanup runs: temporary files go, no output is replaced


def main(argv: Sequence[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminated)  # `quail worker serve` sets its own
    try:
        sys.exit(run(argv))
    except QuailError as e:
        print(f"quail: error: {e}", file=sys.stderr)
        sys.exit(2)
