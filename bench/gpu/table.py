"""The GPU check's table run (issue 51): a W1-shaped table through the command line, as a user
runs it. Documents of about 150 tokens; a filter of W1's 3 predicates, then a classify of 5 labels
over the rows it kept, as one `quail pipeline` in a process of its own, on the check's model of
Qwen2.5-1.5B's shape (random weights, bf16) written as a safetensors directory with SmolLM2's
tokenizer. Measured: the command's wall time from its start, the tokens it computed (its stats),
tok/s, model FLOP utilisation against the measured bf16 matmul ceiling, the GPU memory the command
took at its peak (nvidia-smi, sampled: its arena takes --gpu-memory-utilization of what was free,
by design, so the arena's peak pages say what the table needed); transformers in batches on a
sample of the same table, for the ratio; the extrapolation to 10^6 rows and to 10^7 rows on 8
workers.

The documents are random words drawn from W1's texts: distinct rows (a repeated row would be
answered once, which flatters the rate), and the threshold is the median P(yes) of the first
predicate on a sample, so the random model keeps about half the rows a predicate, as W1 does.
"""

import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bench.common.systems import Stage, Transformers, decide, label_questions, yes_no
from bench.gpu.w1 import median_p
from quail.session import Session

LABELS = ["syntax", "library", "errors", "types", "tools"]
QUESTION = "Which part of Python is this text about?"
DOCUMENT_TOKENS = 150


def documents(n: int, vocabulary_texts: list[str], s: Session, tokens: int = DOCUMENT_TOKENS,
              seed: int = 0) -> list[str]:
    """n documents of about `tokens` tokens, each a random draw of the texts' words."""
    words = np.array(sorted({w for t in vocabulary_texts for w in t.split()}), dtype=object)
    rng = np.random.default_rng(seed)
    probe = [" ".join(rng.choice(words, 100)) for _ in range(50)]
    per_word = statistics.mean(len(s.layout.document(t)) for t in probe) / 100
    picks = rng.integers(0, len(words), size=(n, max(1, round(tokens / per_word))))
    return [" ".join(row) for row in words[picks]]


def pipeline_file(folder: Path, predicates: list[str], threshold: float) -> Path:
    """The filter and the classify of its rows, as a pipeline file (JSON, which YAML reads)."""
    spec = {"tables": {"docs": "docs.parquet"},
            "operators": [{"name": "kept", "filter": {"input": "docs", "column": "text", "predicates": predicates,
                                                       "threshold": threshold}, "output": "kept.parquet"},
                          {"name": "topic", "classify": {"input": "kept", "column": "text", "labels": LABELS,
                                                         "question": QUESTION}, "output": "topic.parquet"}]}
    path = folder / "table.yaml"
    path.write_text(json.dumps(spec, indent=1))
    return path


class GpuMemory:
    """The most device memory a process added to what the GPU held before it started: the GPU's
    used memory (nvidia-smi, every half second) less its use before (the check's own process holds
    still meanwhile). A container's nvidia-smi often lists no process of its own, so not per pid."""

    def __init__(self):
        self.before, self.peak_mib, self._stop = self._used(), 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def _used() -> int | None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                                  str(torch.cuda.current_device())], capture_output=True, text=True, timeout=10).stdout
            return int(out.split()[0])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            return None

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            used = self._used()
            if used is None or self.before is None:
                return
            self.peak_mib = max(self.peak_mib, used - self.before)

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join()
        return self.peak_mib / 1024 if self.peak_mib else None


def save_model(hf, tokenizer_file: str, folder: Path) -> Path:
    """The check's model as a directory `--model` takes: config.json, safetensors, tokenizer.json."""
    hf.save_pretrained(folder, safe_serialization=True)
    (folder / "tokenizer.json").write_bytes(Path(tokenizer_file).read_bytes())
    return folder


def run_cli(folder: Path, pipeline: Path, model: Path, device: torch.device, max_batch_tokens: int,
            timeout: float | None, log) -> dict:
    """`quail pipeline` on the table, timed from the command's start; its stats and peak memory. A
    command still running after `timeout` seconds is killed, and the section fails saying so."""
    cmd = [sys.executable, "-m", "quail.cli", "pipeline", str(pipeline), "--model", str(model),
           "--device", str(device), "--dtype", "bfloat16", "--max-batch-tokens", str(max_batch_tokens)]
    start = time.perf_counter()
    with open(folder / "cli.log", "w") as out:
        memory = GpuMemory() if device.type == "cuda" else None
        proc = subprocess.Popen(cmd, cwd=folder, stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = f"killed after {timeout:.0f} s, past the budget"
    seconds = time.perf_counter() - start
    peak = memory.stop() if memory else None
    if rc:
        raise RuntimeError(f"quail pipeline: {rc}: {(folder / 'cli.log').read_text()[-2000:]}")
    stats = {name: json.loads((folder / f"{name}.parquet.stats.json").read_text()) for name in ("kept", "topic")}
    log(f"  quail pipeline: {seconds:.1f} s; " + "; ".join(
        f"{n}: {st['rows_out']:,} rows, {st['tokens_computed']:,} computed, {st['seconds']:.1f} s"
        for n, st in stats.items()))
    return {"seconds": seconds, "stats": stats, "peak_memory_gib": peak, "command": " ".join(cmd)}


def transformers_sample(s: Session, hf, texts: list[str], predicates: list[str], threshold: float,
                        device: torch.device, batch: int) -> dict:
    """The same filter (one predicate at a time over the rows still kept) then the classify of the
    rows it kept, asked of transformers in left-padded batches."""
    runner = Transformers(hf, device)
    docs = [s.layout.document(t) for t in texts]
    questions = [yes_no(s, s.layout.yes_no_question(p)) for p in predicates]
    start = time.perf_counter()
    with torch.inference_mode():
        stage = Stage("filter", docs, questions, "filter", threshold)
        rows = [row for (_, row), ok in decide(stage, *runner.batches(stage, batch)).items() if ok]
        if rows:
            stage = Stage("classify", [docs[r] for r in rows], label_questions(s, QUESTION, LABELS), "classify",
                          rows=rows)
            decide(stage, *runner.batches(stage, batch))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"rows": len(texts), "kept": len(rows), "seconds": time.perf_counter() - start,
            "tokens_computed": runner.computed, "batch": batch}


def run_table(s: Session, hf, tokenizer_file: str, vocabulary: list[str], predicates: list[str],
              device: torch.device, rows: int, sample: int, batch: int, max_batch_tokens: int, flops_ceiling: float,
              folder: Path, deadline: float | None, log) -> dict:
    """The table run and the transformers sample; the figures the GPU check records as `table`."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = documents(rows, vocabulary, s)
    probe, _ = s.filter(texts[:512], predicates[:1], 0.0)
    threshold = median_p(p[0] for p in probe.p_yes)
    pq.write_table(pa.table({"id": np.arange(rows), "text": texts}), folder / "docs.parquet")
    start = time.perf_counter()
    model = save_model(hf, tokenizer_file, folder / "model")
    log(f"  {rows:,} rows written, the model saved in {time.perf_counter() - start:.1f} s; threshold {threshold:.4f}")
    timeout = None if deadline is None else max(1.0, deadline - time.perf_counter())
    quail = run_cli(folder, pipeline_file(folder, predicates, threshold), model, device, max_batch_tokens, timeout,
                    log)
    hf_sample = transformers_sample(s, hf, texts[:sample], predicates, threshold, device, batch)
    log(f"  transformers, batches of {batch}: {hf_sample['rows']:,} rows in {hf_sample['seconds']:.1f} s, "
        f"{hf_sample['kept']:,} kept")
    stats = quail["stats"]
    computed = sum(st["tokens_computed"] for st in stats.values())
    seconds = quail["seconds"]
    cfg = hf.config
    embedding = cfg.vocab_size * cfg.hidden_size
    flops_per_token = 2 * (sum(p.numel() for p in hf.parameters()) - embedding)  # the head runs on read rows only
    per_row = seconds / rows
    hf_per_row = hf_sample["seconds"] / hf_sample["rows"]
    return {"rows": rows, "seconds": seconds, "tokens_computed": computed,
            "tokens_naive": sum(st["tokens_naive"] for st in stats.values()), "tok_s": computed / seconds,
            "mfu": computed * flops_per_token / seconds / flops_ceiling, "peak_memory_gib": quail["peak_memory_gib"],
            "arena_pages": stats["kept"]["pages_total"], "pages_peak": max(st["pages_peak"] for st in stats.values()),
            "minutes_per_million_rows": per_row * 1e6 / 60,
            "minutes_ten_million_rows_8_workers": per_row * 1e7 / 8 / 60,
            "kept": stats["kept"]["rows_out"], "threshold": threshold,
            "document_tokens_mean": statistics.mean(len(s.layout.document(t)) for t in texts[:1000]),
            "operator_seconds": {n: st["seconds"] for n, st in stats.items()}, "command": quail["command"],
            "transformers_sample": hf_sample, "x_transformers": hf_per_row / per_row,
            "transformers_minutes_per_million_rows": hf_per_row * 1e6 / 60}
