"""The `quail` command line: filter, classify and join a Parquet or CSV file; manage models."""

import argparse
import json
import os
import sys
from pathlib import Path

import pyarrow as pa

from quail.cli.progress import Progress
from quail.cli.tables import read_table, text_column, write_table
from quail.errors import QuailError
from quail.model.registry import DEFAULT_MODEL, EMBEDDED, installed, pull


def _engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", required=True, help="output Parquet file (written atomically)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"{', '.join(EMBEDDED)}, a .gguf file or a HF directory")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    p.add_argument("--arena-pages", type=int, help="KV arena size in 16-token pages (default: 1 GiB of KV)")
    p.add_argument("--max-batch-tokens", type=int, default=2048, help="most tokens in one forward pass")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--no-reuse", action="store_true", help="compute every prompt from scratch (for checks)")
    p.add_argument("--stats", help="write the token accounting to this JSON file")
    p.add_argument("--on-null", choices=["fail", "skip"], default="fail", help="NULL or empty text")
    p.add_argument("--truncate", action="store_true", help="cut documents longer than the model's context")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="quail", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    f = sub.add_parser("filter", help="keep the rows for which every predicate holds")
    f.add_argument("input")
    f.add_argument("--text-column", required=True)
    f.add_argument("--predicate", action="append", default=[], help="a yes/no question; repeat for several")
    f.add_argument("--keep-all", action="store_true", help="keep every row, adding passed and p_yes_1..k")
    f.add_argument("--limit", type=int, help="the first N passing rows, in input order")
    f.add_argument("--threshold", type=float, default=0.5)
    _engine_options(f)

    c = sub.add_parser("classify", help="label each row with one of the given labels")
    c.add_argument("input")
    c.add_argument("--text-column", required=True)
    c.add_argument("--label", action="append", default=[], help="a label; repeat for each")
    c.add_argument("--question", help="the question the labels answer")
    _engine_options(c)

    j = sub.add_parser("join", help="pairs of left and right rows that satisfy a condition")
    j.add_argument("left")
    j.add_argument("right")
    j.add_argument("--left-column", required=True)
    j.add_argument("--right-column", required=True)
    j.add_argument("--condition", required=True)
    j.add_argument("--threshold", type=float, default=0.5)
    _engine_options(j)

    m = sub.add_parser("models", help="list or install the embedded models")
    m.add_argument("action", choices=["list", "pull"])
    m.add_argument("name", nargs="?", choices=list(EMBEDDED))
    return ap


def _check_params(args) -> None:
    threshold = getattr(args, "threshold", None)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise QuailError(f"--threshold {args.threshold} is outside [0, 1]")
    if args.command == "filter":
        if not args.predicate:
            raise QuailError("--predicate: give at least one predicate")
        for i, p in enumerate(args.predicate, 1):
            if not p.strip():
                raise QuailError(f"--predicate {i} is empty")
        if args.limit is not None and args.limit < 1:
            raise QuailError(f"--limit must be at least 1, got {args.limit}")
    if args.command == "classify":
        if len(args.label) < 2:
            raise QuailError("--label: give at least two labels")
        for i, label in enumerate(args.label, 1):
            if not label.strip():
                raise QuailError(f"--label {i} is empty")
        dupes = sorted({label for label in args.label if args.label.count(label) > 1})
        if dupes:
            raise QuailError(f"--label: duplicate labels {dupes}")
    if args.command == "join" and not args.condition.strip():
        raise QuailError("--condition is empty")


def _add_columns(table: pa.Table, columns: dict, source: str) -> pa.Table:
    for name, values in columns.items():
        if name in table.column_names:
            raise QuailError(f"{source}: already has a column {name!r}, which the output adds")
        table = table.append_column(name, values)
    return table


def _scatter(values: list, rows: list[int], n: int) -> list:
    out = [None] * n
    for r, v in zip(rows, values):
        out[r] = v
    return out


def _inputs(args) -> list[tuple[pa.Table, list[str], list[int]]]:
    """Each input table with its texts and their row numbers, checked before the model loads."""
    if args.command == "join":
        sources = [(args.left, args.left_column), (args.right, args.right_column)]
    else:
        sources = [(args.input, args.text_column)]
    out = []
    for path, column in sources:
        table = read_table(path)
        out.append((table, *text_column(table, column, path, args.on_null)))
    return out


def _run_filter(session, args, inputs, progress):
    [(table, texts, rows)] = inputs
    progress = progress(len(texts), "filter")
    result, stats = session.filter(texts, args.predicate, args.threshold, args.limit, not args.no_reuse,
                                   truncate=args.truncate, progress=progress, rows=rows)
    stats.rows_skipped = table.num_rows - len(texts)
    done = rows[: len(result.passed)]
    passing = [r for r, ok in zip(done, result.passed) if ok]
    if args.limit is not None:
        passing = passing[: args.limit]
        if args.keep_all and len(passing) == args.limit:
            done = [r for r in done if r <= passing[-1]]
    if not args.keep_all:
        return table.take(pa.array(passing, pa.int64())), stats
    extra = {"passed": pa.array(_scatter(result.passed, rows, table.num_rows), pa.bool_())}
    for k in range(len(args.predicate)):
        extra[f"p_yes_{k + 1}"] = pa.array(_scatter([p[k] for p in result.p_yes], rows, table.num_rows), pa.float64())
    limit_rows = done[-1] + 1 if done else 0
    return _add_columns(table, extra, args.input).slice(0, limit_rows if args.limit else table.num_rows), stats


def _run_classify(session, args, inputs, progress):
    [(table, texts, rows)] = inputs
    result, stats = session.classify(texts, args.label, args.question, not args.no_reuse, truncate=args.truncate,
                                     progress=progress(len(texts), "classify"), rows=rows)
    stats.rows_skipped = table.num_rows - len(texts)
    n = table.num_rows
    extra = {"label": pa.array(_scatter([args.label[i] for i in result.labels], rows, n), pa.string())}
    for k, label in enumerate(args.label):
        extra[f"p_{label}"] = pa.array(_scatter([p[k] for p in result.probabilities], rows, n), pa.float64())
    return _add_columns(table, extra, args.input), stats


def _run_join(session, args, inputs, progress):
    [(left, ltexts, lrows), (right, rtexts, rrows)] = inputs
    result, stats = session.join(ltexts, rtexts, args.condition, not args.no_reuse, truncate=args.truncate,
                                 progress=progress(len(ltexts), "join"), left_rows=lrows, right_rows=rrows)
    stats.rows_skipped = (left.num_rows - len(ltexts)) + (right.num_rows - len(rtexts))
    pairs = [(lrows[i], rrows[j], p) for i, ps in enumerate(result.p_yes) for j, p in enumerate(ps)
             if p >= args.threshold]
    lt = left.take(pa.array([a for a, _, _ in pairs], pa.int64()))
    rt = right.take(pa.array([b for _, b, _ in pairs], pa.int64()))
    columns = {f"left_{n}": lt.column(n) for n in lt.column_names}
    columns |= {f"right_{n}": rt.column(n) for n in rt.column_names}
    columns["p_yes"] = pa.array([p for _, _, p in pairs], pa.float64())
    return pa.table(columns), stats


def _summary(stats, rows_out: int) -> str:
    r = stats.tokens_reused
    saved = 1 - stats.tokens_computed / stats.tokens_naive if stats.tokens_naive else 0.0
    return (
        f"rows out: {rows_out}\n"
        f"tokens computed: {stats.tokens_computed:,} of {stats.tokens_naive:,} without reuse ({saved:.0%} saved)\n"
        f"tokens reused: rewind {r['rewind']:,}, prefix {r['prefix']:,}, retention {r['retention']:,}\n"
        f"forward passes: {stats.forward_passes}, peak pages: {stats.pages_peak} of {stats.pages_total}, "
        f"{stats.seconds:.1f} s ({stats.tokens_computed / max(stats.seconds, 1e-9):,.0f} tok/s)"
    )


def _models(args) -> None:
    if args.action == "list":
        for name in EMBEDDED:
            mark = "installed" if installed(name) else "not installed"
            print(f"{name}\t{mark}{'  (default)' if name == DEFAULT_MODEL else ''}")
        return
    if args.name is None:
        raise QuailError("quail models pull NAME: name a model")
    pull(args.name)


def run(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command == "models":
        _models(args)
        return 0
    _check_params(args)
    if Path(args.output).is_dir():
        raise QuailError(f"--output {args.output} is a directory")
    import torch

    from quail.session import Session

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    runner = {"filter": _run_filter, "classify": _run_classify, "join": _run_join}[args.command]
    bars = []

    def progress(rows, what):
        bars.append(Progress(rows, what))
        return bars[-1]

    inputs = _inputs(args)
    session = Session.open(args.model, args.dtype, args.arena_pages, args.max_batch_tokens)
    try:
        table, stats = runner(session, args, inputs, progress)
    finally:
        for b in bars:
            b.close()
    write_table(table, args.output)
    if args.stats:
        doc = {"command": args.command, "model": session.loaded.name, "rows_out": table.num_rows} | stats.to_dict()
        Path(args.stats).write_text(json.dumps(doc, indent=2))
    print(_summary(stats, table.num_rows), file=sys.stderr)
    return 0


def main(argv=None) -> None:
    try:
        sys.exit(run(argv))
    except QuailError as e:
        print(f"quail: error: {e}", file=sys.stderr)
        sys.exit(2)
