"""Does per-row cost stay flat as the table grows? (issue 11)

A two-predicate filter with `--threshold 0` (every row is asked both predicates) over short
random-word documents, through the real CLI, on a tiny random Llama (2 layers, hidden 64,
SmolLM2's tokenizer) saved as a Hugging Face directory: with a model that small, the time is the
engine's own overhead. Reports rows/s, tokens/s and the CLI process's peak RSS per table size.

    python -m bench scale filter 2000 8000 32000          # sizes in rows
    python -m bench scale filter --profile 8000           # also py-spy: the scheduler's share of time
    python -m bench scale filter --model qwen2.5-coder-0.5b 200   # a real model on reference documents
                                                                  # of 250-300 tokens
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common.results import parser, write_json
from bench.common.tiny import PEAK_RSS, SCALE, table, tiny_model


def run(model: str, rows: int, profile: bool) -> dict:
    data = table(SCALE / (f"docs-{model}-{rows}.parquet" if model != "tiny" else f"docs-{rows}.parquet"), rows, model)
    model = str(tiny_model()) if model == "tiny" else model
    output, stats = SCALE / f"out-{rows}.parquet", SCALE / f"stats-{rows}.json"
    # a fresh stats file, so that a run that fails cannot report the last one's figures
    stats.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "quail.cli", "filter", str(data), "--text-column", "text",
           "--predicate", "Is this about sport?", "--predicate", "Does it name a place?", "--threshold", "0",
           "--keep-all", "--model", str(model), "--dtype", "float32", "--output", str(output), "--stats", str(stats),
           "--no-answer-store"]  # the engine's own cost per row: a second run must not find its answers stored
    if profile:
        cmd = ["py-spy", "record", "-r", "50", "-f", "raw", "-o", str(SCALE / f"profile-{rows}.txt"), "--"] + cmd
    start = time.perf_counter()
    # a fresh parent per size, so that its children's peak RSS is this run's alone
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *cmd], check=True, stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    seconds = time.perf_counter() - start
    peak_kib = int(done.stdout.split()[-1])
    s = json.loads(stats.read_text())
    row = {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds, 1),
           "tokens_per_s": round(s["tokens_computed"] / seconds), "tokens_computed": s["tokens_computed"],
           "peak_rss_mb": round(peak_kib / 1024)}
    if profile:
        row["scheduler_share"] = scheduler_share(SCALE / f"profile-{rows}.txt")
    return row


def scheduler_share(raw: Path) -> float:
    """Of all samples, the share whose stack is inside executor/scheduler.py but not the model's pass."""
    total = inside = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        if "scheduler.py" in stack and "model_runner.py" not in stack:
            inside += int(count)
    return round(inside / total, 3) if total else 0.0


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, stem="scale-filter")
    ap.add_argument("sizes", nargs="+", type=int)
    ap.add_argument("--profile", action="store_true", help="run under py-spy (pip install py-spy)")
    ap.add_argument("--model", default="tiny", help="tiny (a random 2-layer Llama) or an embedded model's name")
    args = ap.parse_args(argv)
    SCALE.mkdir(parents=True, exist_ok=True)
    results = [dict(run(args.model, n, args.profile), model=args.model) for n in args.sizes]
    for r in results:
        print(json.dumps(r))
    write_json(args, {"model": args.model, "runs": results})
