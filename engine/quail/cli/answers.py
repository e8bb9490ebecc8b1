"""`quail answers stats|clear`: what the answer store holds, or empty it."""

import argparse

from quail.cli.common import store_options
from quail.errors import QuailError
from quail.store import open_store


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("answers", help="the answer store: what it holds, or empty it",
                       description="the answer store: what it holds, or empty it")
    actions = p.add_subparsers(dest="action", required=True)
    for name, text, func in (("stats", "where the store is, its answers and bytes", stats),
                             ("clear", "remove every answer", clear)):
        a = actions.add_parser(name, help=text, description=text)
        store_options(a)
        a.set_defaults(func=func)


def stats(args: argparse.Namespace) -> None:
    s = open_store(args.answer_store, args.answer_store_file).stats()
    print(f"{s['path']}: {s['answers']:,} answers, {s['bytes']:,} bytes of {s['max_bytes']:,}"
          + ("" if s["writable"] else " (read-only)"))


def clear(args: argparse.Namespace) -> None:
    store = open_store(args.answer_store, args.answer_store_file)
    if not store.stats()["writable"]:
        raise QuailError(f"the answer store {store.path} cannot be written (read-only, unreachable or of a newer "
                         f"schema): nothing was removed")
    print(f"removed {store.clear():,} answers from {store.path}")
