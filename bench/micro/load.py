"""A model's load, each in a fresh process after a `sync`: its first ever (a new home: the GGUF's
fields read and its bytes hashed, the dtype measured, the weights dequantized, converted and kept)
and a later one (the converted weights mapped and read). Seconds of `load_model`, torch's import
apart; each run and the median, and the process's peak RSS.

    python -m bench micro load [--model qwen2.5-coder-1.5b] [--runs 3]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench.common.results import ROOT, parser, write_json

# what one process runs: the load timed, with the weights read now (not at their first use)
LOAD = """
import json, resource, sys, time
start = time.perf_counter()
import torch
from quail.model.loader import load_model
imported = time.perf_counter()
loaded = load_model(sys.argv[1], defer=False)
print(json.dumps({"import": imported - start, "load": time.perf_counter() - imported, "dtype": str(loaded.model.dtype),
                  "why": loaded.dtype_why,
                  "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
"""


def _timed(model: str, home: str) -> dict:
    subprocess.run(["sync"], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("QUAIL_CONVERTED_WEIGHTS", "QUAIL_CALIBRATIONS")}
    env |= {"QUAIL_HOME": home, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", LOAD, model], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    runs: dict[str, list[dict]] = {"first": [], "later": []}
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="quail-load-") as home:
            for when in ("first", "later"):
                runs[when].append(_timed(args.model, home))
                print(f"run {i + 1} {when}: {runs[when][-1]['load']:.1f} s", flush=True)
    medians = {when: statistics.median(r["load"] for r in rs) for when, rs in runs.items()}
    table = "| load | median (s) | runs (s) | peak RSS (GB) |\n|---|---:|---|---:|\n" + "".join(
        f"| {when} | {medians[when]:.1f} | {', '.join(format(r['load'], '.1f') for r in rs)} | "
        f"{max(r['peak_rss_gb'] for r in rs):.2f} |\n" for when, rs in runs.items())
    print(table)
    write_json(args, {"model": args.model, "median_seconds": medians, "runs": runs}, markdown=table)
