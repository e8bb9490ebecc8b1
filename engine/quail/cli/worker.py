"""`quail worker serve|status|stop`: the long-lived worker that Airflow tasks send jobs to, what a
worker is doing (or every worker's load), and stopping the local ones that tasks started on demand."""

import argparse
import ipaddress
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from quail.cli.common import Parser, at_least, device_options, host, open_session, seconds, start_engine, store_options
from quail.cli.describe import describe_job, describe_load, describe_worker
from quail.constants import DEFAULT_MAX_QUEUED, DEFAULT_PORT
from quail.errors import QuailError
from quail.model.registry import DEFAULT_MODEL
from quail.store import open_store
from quail.worker.locations import check_location, is_tls, server_tls, tcp_location, unix_location
from quail.worker.tokens import check_token_path, new_token, read_token, token_from_file, write_token

if TYPE_CHECKING:
    from quail.worker.metrics import Metrics


def _where(serve: bool) -> Parser:
    """The worker's location and token: where `serve` listens, where `status` asks."""
    p = Parser(add_help=False)
    p.add_argument("--host", type=host, default="127.0.0.1",
                   help="listen here (default: loopback only)" if serve else "the worker's host (default: loopback)")
    p.add_argument("--port", type=at_least(1, 65535), default=DEFAULT_PORT)
    p.add_argument("--socket", help=f"{'listen on' if serve else 'talk to'} this Unix socket instead")
    p.add_argument("--token-file", help="a file (mode 0600) holding the bearer token clients must send; default: "
                                        "$QUAIL_WORKER_TOKEN, else a random one written beside the socket, or "
                                        "under $QUAIL_HOME/worker for a port, for this user only" if serve else
                                        "a file (mode 0600) holding the worker's token; default: "
                                        "$QUAIL_WORKER_TOKEN, else the one the worker wrote for this user")
    return p


def add_parser(sub: argparse._SubParsersAction) -> None:
    text = "the long-lived worker that Airflow tasks send jobs to"
    actions = sub.add_parser("worker", help=text, description=text).add_subparsers(dest="action", required=True)
    text = "load the model and compute the jobs that tasks send"
    s = actions.add_parser("serve", help=text, description=text, parents=[device_options(), _where(serve=True)])
    s.add_argument("--model", default=DEFAULT_MODEL, help="an embedded model's name, a .gguf file or a HF directory")
    s.add_argument("--tls-cert", metavar="PEM", help="TLS with this certificate chain (grpc+tls://HOST:PORT), "
                                                     "required off loopback: it names the host clients reach")
    s.add_argument("--tls-key", metavar="PEM", help="the certificate's private key, a file (mode 0600)")
    s.add_argument("--ttl", type=seconds, default=3600.0, help="seconds finished results are kept")
    s.add_argument("--idle-timeout", type=seconds, help="exit after this many seconds without calls or work")
    s.add_argument("--no-answer-store", action="store_true", help="keep no answers across jobs and restarts")
    store_options(s, "; a pool of workers shares one database")
    s.add_argument("--max-jobs", type=at_least(1), default=8,
                   help="jobs computed at once, batched into the same passes")
    s.add_argument("--max-queued", type=at_least(1), default=DEFAULT_MAX_QUEUED,
                   help="unfinished jobs one DAG may hold (4 times this for all); beyond, a submission waits")
    s.add_argument("--metrics-port", type=at_least(1, 65535), metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (https with --tls-cert); HOST is "
                        "--host, loopback for a --socket worker; no token needed: numbers and the model's name only")
    s.add_argument("--metrics-by-dag", action=argparse.BooleanOptionalAction, default=True,
                   help="label the metrics by DAG id (the only label they take from tasks)")
    s.set_defaults(func=serve)
    text = "the worker's model, device and memory, and its jobs; with --all, each worker's load"
    t = actions.add_parser("status", help=text, description=text, parents=[_where(serve=False)])
    t.add_argument("--tls-ca", metavar="PEM", help="trust the worker's certificate if this authority signed it "
                                                   "(default: the system's); implies grpc+tls")
    t.add_argument("--all", action="store_true", help="one line per worker, with its load: the local workers "
                                                      "this user started, and each --worker")
    t.add_argument("--worker", action="append", default=[], metavar="LOCATION",
                   help="with --all: also this worker (grpc://HOST:PORT, with the token given); repeatable")
    t.set_defaults(func=status)
    text = "stop the local workers that tasks or the demo started on demand"
    actions.add_parser("stop", help=text, description=text).set_defaults(func=stop)


def _token(args: argparse.Namespace) -> str | None:
    """The token given: --token-file, else $QUAIL_WORKER_TOKEN."""
    return token_from_file(args.token_file) if args.token_file else os.environ.get("QUAIL_WORKER_TOKEN") or None


def _location(args: argparse.Namespace, tls: bool) -> str:
    """Where the worker listens (serve) or is asked (status): --socket, else --host and --port."""
    if args.socket and tls:
        raise QuailError("TLS is for a TCP worker (--host, --port); a Unix socket admits its owner only")
    return unix_location(Path(args.socket).resolve()) if args.socket else \
        tcp_location("grpc+tls" if tls else "grpc", args.host, args.port)


def _resolved(name: str) -> str:
    """The address a --host names (a name resolves to its first address; one that does not, to none
    that is loopback)."""
    try:
        return str(socket.getaddrinfo(name, None)[0][4][0])
    except OSError:
        return "0.0.0.0"


def stop(args: argparse.Namespace) -> None:
    from quail.worker.local import stop_local_workers

    stopped = stop_local_workers()
    print(f"stopped {len(stopped)} local worker(s)" + (f": pid {', '.join(map(str, stopped))}" if stopped else ""))


def status(args: argparse.Namespace) -> None:
    if args.all:
        from quail.worker.local import local_workers

        token = _token(args)
        for location in args.worker:
            check_location(location)
        for location, local_token in local_workers():
            print(describe_load(location, local_token))
        for location in args.worker:
            print(describe_load(location, token or read_token(location), args.tls_ca if is_tls(location) else None))
        return
    if args.worker:
        raise QuailError("--worker is for `quail worker status --all`")
    from quail.worker.client import WorkerClient

    location = _location(args, tls=bool(args.tls_ca))
    client = WorkerClient(location, _token(args) or read_token(location), tls_ca=args.tls_ca)
    print(describe_worker(client.info()))
    for job in client.status():
        print(describe_job(job))


def _metrics(args: argparse.Namespace) -> "Metrics | None":
    """The worker's metrics, served before its model loads: a port already taken is refused at once."""
    if args.metrics_port is None:
        return None
    from quail.worker.metrics import Metrics

    metrics = Metrics(by_dag=args.metrics_by_dag)
    host = "127.0.0.1" if args.socket else args.host
    try:
        metrics.serve(args.metrics_port, host, (args.tls_cert, args.tls_key) if args.tls_cert else None)
    except OSError as e:
        raise QuailError(f"--metrics-port: cannot serve metrics on {host}:{args.metrics_port}: "
                         f"{e.strerror or e}") from None
    return metrics


def serve(args: argparse.Namespace) -> None:
    tls = server_tls(args.tls_cert, args.tls_key)
    location = _location(args, tls=tls is not None)
    start_engine(args, "`quail worker serve`")
    from quail.worker.liveness import check_pid_path, hold, release
    from quail.worker.server import Worker, claim_location

    # before the model loads, and before a stale socket is removed: a file at its pid or token path
    # that no worker of this user wrote, or a live worker's location, is refused at once
    check_pid_path(location)
    given = _token(args)
    if not given:
        check_token_path(location)
    claim_location(location)
    metrics = _metrics(args)
    alive = hold(location)
    # each start-up phase on its own line: the hook that started this worker logs them in the task's log
    session = open_session(args.model, args, lambda m: print(f"quail worker: {m}", file=sys.stderr, flush=True))
    session.store = None if args.no_answer_store else \
        open_store(args.answer_store, args.answer_store_file, args.max_jobs)
    token = given or new_token()
    server = Worker(session, location, token, args.ttl, args.idle_timeout, args.max_jobs, tls, args.max_queued,
                    metrics)
    if not args.socket and not tls and not ipaddress.ip_address(_resolved(args.host)).is_loopback:
        print(f"quail worker: WARNING: {location} serves beyond this host without TLS: whoever can reach or "
              f"take over the port sees the token and the documents; give --tls-cert and --tls-key "
              f"(docs/deploying.md, \"TLS\")", file=sys.stderr, flush=True)
    if not given:
        write_token(location, token)
    signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
    print(f"quail worker: {session.loaded.name} on {location}; {session.engine.settings.memory.describe()}",  # type: ignore[union-attr]
          file=sys.stderr, flush=True)
    server.serve()
    server.drain()
    release(alive, location)
