"""The one entry point: `python -m bench <kind> <name> [args]`, from the repository root.

    python -m bench                          # every benchmark, by kind, with its one line
    python -m bench micro                    # the micro-benchmarks
    python -m bench micro linear --help      # one benchmark's arguments
    python -m bench e2e suite --size bench   # run it

A benchmark is the module bench/<kind>/<name>.py; its `main(argv)` parses its own arguments. This
module only finds it and hands it the rest of the command line.
"""

import ast
import importlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = {
    "micro": "one layer, kernel, library or store at a time",
    "e2e": "whole workloads, Quail against what a user would otherwise run",
    "scale": "per-row cost, memory and reuse as tables and pools grow",
    "quality": "answer quality of the embedded models on labelled data",
    "gpu": "the prepared GPU check (bash bench/gpu_check.sh on the GPU machine)",
}


def benchmarks(kind: str) -> dict[str, str]:
    """name -> the first sentence of its docstring, for every module of the kind with a `main`, read
    without importing it."""
    out = {}
    for path in sorted((HERE / kind).glob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            paragraph = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
            out[path.stem] = re.split(r"(?<=[.?])\s", paragraph)[0]
    return out


def listing(kinds: list[str]) -> str:
    lines = ["usage: python -m bench <kind> <name> [args]   (--help after a name: its arguments)", ""]
    for kind in kinds:
        lines.append(f"{kind}: {KINDS[kind]}")
        for name, line in benchmarks(kind).items():
            lines.append(f"  {name:16s} {line[:96] + ('...' if len(line) > 96 else '')}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing(list(KINDS)))
        return
    kind, *rest = argv
    if kind not in KINDS:
        sys.exit(f"no kind {kind!r}: one of {', '.join(KINDS)}\n\n{listing(list(KINDS))}")
    if not rest or rest[0] in ("-h", "--help"):
        print(listing([kind]))
        return
    name, *args = rest
    if name not in benchmarks(kind):
        sys.exit(f"no benchmark {kind} {name!r}\n\n{listing([kind])}")
    importlib.import_module(f"bench.{kind}.{name}").main(args)


if __name__ == "__main__":
    main(sys.argv[1:])
