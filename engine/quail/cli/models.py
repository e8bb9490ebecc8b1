"""`quail models list|pull`: the embedded models, and installing one."""

import argparse

from quail.model.registry import DEFAULT_MODEL, EMBEDDED, installed, pull


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list or install the embedded models",
                       description="list or install the embedded models")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="each embedded model, installed or not",
                       description="each embedded model, installed or not").set_defaults(func=list_models)
    p = actions.add_parser("pull", help="install an embedded model", description="install an embedded model")
    p.add_argument("name", choices=list(EMBEDDED))
    p.set_defaults(func=pull_model)


def list_models(args: argparse.Namespace) -> None:
    for name in EMBEDDED:
        mark = "installed" if installed(name) else "not installed"
        print(f"{name}\t{mark}{'  (default)' if name == DEFAULT_MODEL else ''}")


def pull_model(args: argparse.Namespace) -> None:
    pull(args.name)
