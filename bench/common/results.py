"""One argument convention and one results format for every benchmark.

Each benchmark's `main(argv)` builds its parser with `parser(__name__, __doc__)`, which adds
`--output-json PATH` (default: bench/results/<name>-<YYYYMMDD>.json), and ends with
`write_json(args, figures)`: the figures with the run's date, git commit, command and machine.
Only the standard library is imported here (torch, where installed, for the machine's record):
the GPU machine runs this module too.
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
RESULTS = BENCH / "results"
DATA = BENCH / "data"
OUT = ROOT / "out"  # scratch files a run makes (tables, models, logs); ignored by git


def parser(module: str, doc: str | None, stem: str | None = None) -> argparse.ArgumentParser:
    """The parser of benchmark `module` ("bench.<kind>.<name>"), with `--output-json`. `stem` names
    the default results file (default: the module's name)."""
    kind, name = module.split(".")[-2:]
    stem = stem or name.replace("_", "-")
    ap = argparse.ArgumentParser(prog=f"python -m bench {kind} {name}", description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output-json", type=Path, metavar="PATH",
                    help=f"where the figures go (default: bench/results/{stem}-YYYYMMDD.json); a .md beside "
                         "it where the benchmark writes tables")
    ap.set_defaults(benchmark=f"{kind} {name}", stem=stem)
    return ap


def output_path(args: argparse.Namespace, stem: str | None = None) -> Path:
    """--output-json, or bench/results/<stem>-<today>.json."""
    if args.output_json:
        return Path(args.output_json)
    return RESULTS / f"{stem or args.stem}-{datetime.date.today():%Y%m%d}.json"


def previous(args: argparse.Namespace, stem: str | None = None) -> dict:
    """What the output file already holds (a benchmark that merges runs into it), else {}."""
    path = output_path(args, stem)
    return json.loads(path.read_text()) if path.exists() else {}


def git_commit() -> dict:
    """The commit the run was made at, and whether tracked files differed from it (None: no git)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], check=True, capture_output=True, text=True,
                              timeout=30).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def machine() -> dict:
    """CPU model, cores, Python; torch's version, threads and GPU where torch is installed."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    except OSError:
        pass
    out: dict = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}
    if importlib.util.find_spec("torch") is not None:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        out |= {"threads": torch.get_num_threads(), "torch": torch.__version__, "gpu": gpu}
    return out


def record(args: argparse.Namespace | None = None) -> dict:
    """The run's own record: benchmark, date, commit, command line and machine."""
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return {"benchmark": getattr(args, "benchmark", None), "date": now, **git_commit(),
            "argv": sys.argv[1:], "machine": machine()}


def write_json(args: argparse.Namespace, figures: dict, stem: str | None = None, markdown: str | None = None) -> Path:
    """Writes the run's record and `figures` (and `markdown` beside it as .md); returns the path."""
    path = output_path(args, stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = record(args)
    doc |= {k: v for k, v in figures.items() if k not in doc}  # a merged file's old record gives way
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    if markdown is not None:
        path.with_suffix(".md").write_text(markdown)
    print(f"wrote {path}" + (f" and {path.with_suffix('.md').name}" if markdown is not None else ""), flush=True)
    return path
