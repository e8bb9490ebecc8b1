"""Does per-row cost stay flat as the table grows? (issue 11)

A two-predicate filter with `--threshold 0` (every row is asked both predicates) over short
random-word documents, through the real CLI, on a tiny random Llama (2 layers, hidden 64,
SmolLM2's tokenizer) saved as a Hugging Face directory: with a model that small, the time is the
engine's own overhead. Reports rows/s, tokens/s and the CLI process's peak RSS per table size.

    python bench/scale.py 2000 8000 32000            # sizes in rows
    python bench/scale.py --profile 8000              # also py-spy: the scheduler's share of time
    python bench/scale.py --model qwen2.5-coder-0.5b 200   # a real model on reference documents
                                                           # of 250-300 tokens (bench/documents.py)
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).parent
OUT = HERE.parent / "out" / "scale"
WORDS = ("match goal team rates bank market phone chip league striker keeper vote court river city "
         "music film storm price coach player season final budget rain trial cloud engine").split()
PEAK_RSS = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=sys.stderr); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def tiny_model(path: Path) -> Path:
    if (path / "config.json").exists():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from quail.model.loader import load_model

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    load_model("smollm2-135m", "float32").tokenizer._tk.save(str(path / "tokenizer.json"))
    return path


def table(path: Path, rows: int, model: str) -> Path:
    if path.exists():
        return path
    if model != "tiny":
        from documents import reference_documents

        from quail.model.loader import load_model

        texts = reference_documents(rows, load_model(model, "float32").tokenizer)
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path)
        return path
    rng = random.Random(rows)
    writer = None
    for lo in range(0, rows, 65536):
        n = min(65536, rows - lo)
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(20, 60))) for _ in range(n)]
        batch = pa.table({"id": pa.array(range(lo, lo + n), pa.int64()), "text": texts})
        writer = writer or pq.ParquetWriter(path, batch.schema)
        writer.write_table(batch)
    writer.close()
    return path


def run(model: str, rows: int, profile: bool) -> dict:
    data = table(OUT / f"docs-{model}-{rows}.parquet" if model != "tiny" else OUT / f"docs-{rows}.parquet", rows, model)
    model = str(tiny_model(OUT / "tiny-llama")) if model == "tiny" else model
    output, stats = OUT / f"out-{rows}.parquet", OUT / f"stats-{rows}.json"
    # a fresh stats file, so that a run that fails cannot report the last one's figures
    stats.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "quail.cli", "filter", str(data), "--text-column", "text",
           "--predicate", "Is this about sport?", "--predicate", "Does it name a place?", "--threshold", "0",
           "--keep-all", "--model", str(model), "--dtype", "float32", "--output", str(output), "--stats", str(stats),
           "--no-answer-store"]  # the engine's own cost per row: a second run must not find its answers stored
    if profile:
        cmd = ["py-spy", "record", "-r", "50", "-f", "raw", "-o", str(OUT / f"profile-{rows}.txt"), "--"] + cmd
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
        row["scheduler_share"] = scheduler_share(OUT / f"profile-{rows}.txt")
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="+", type=int)
    ap.add_argument("--profile", action="store_true", help="run under py-spy (pip install py-spy)")
    ap.add_argument("--model", default="tiny", help="tiny (a random 2-layer Llama) or an embedded model's name")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    results = [dict(run(args.model, n, args.profile), model=args.model) for n in args.sizes]
    for r in results:
        print(json.dumps(r))
    (OUT / f"results-{args.model}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
