"""Does KV retention between two operators hold as the table grows? (issue 26)

`quail pipeline` with a filter (one predicate, `--threshold 0`, so every row passes) and a
classify of its output on the same column (3 labels), over bench/scale.py's random-word documents
on its tiny random Llama, with a 1,200-page arena: the table is far larger than the arena, so the
classify finds its documents retained only if it runs on each window right after the filter.
Reports, per table size, the classify's tokens computed against its floor (the tokens of its
questions and labels alone: what it computes when every document comes from retention), the share
of its documents' tokens reused from retention, rows/s of the whole pipeline and its peak RSS.

Then, with `--rerun`, the next day's run: the same pipeline over the table with 1% of its rows
changed, with the answer store the first run filled. Reported: its tokens computed and its time
against the first run's.

    python bench/reuse_scale.py 2000 16000 128000
    python bench/reuse_scale.py --rerun 16000
    python bench/reuse_scale.py --device cuda --arena-pages 200000 1000000
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from scale import OUT, PEAK_RSS, table, tiny_model

STORE = OUT / "answers.sqlite"


def changed(data: Path, share: float = 0.01) -> Path:
    """The table with every (1/share)-th row's text changed: the next day's data."""
    t = pq.read_table(data)
    step = round(1 / share)
    texts = [x + " storm" if i % step == 0 else x for i, x in enumerate(t.column("text").to_pylist())]
    out = data.with_name(data.stem + "-changed.parquet")
    pq.write_table(t.set_column(t.schema.get_field_index("text"), "text", pa.array(texts)), out)
    return out


def run(rows: int, arena_pages: int, device: str, data: Path | None = None) -> dict:
    data = data or table(OUT / f"docs-{rows}.parquet", rows, "tiny")
    model = tiny_model(OUT / "tiny-llama")
    pipeline = OUT / f"reuse-{rows}.yaml"
    outputs = {name: OUT / f"reuse-{rows}-{name}.parquet" for name in ("kept", "topic")}
    pipeline.write_text(json.dumps({"tables": {"docs": str(data)}, "operators": [
        {"name": "kept", "filter": {"input": "docs", "column": "text", "predicates": ["Is this about sport?"],
                                    "threshold": 0.0}, "output": str(outputs["kept"])},
        {"name": "topic", "classify": {"input": "kept", "column": "text", "labels": ["sport", "money", "weather"]},
         "output": str(outputs["topic"])}]}))
    stats = {name: path.with_name(path.name + ".stats.json") for name, path in outputs.items()}
    for path in stats.values():
        path.unlink(missing_ok=True)  # a run that fails cannot report the last one's figures
    cmd = [sys.executable, "-m", "quail.cli", "pipeline", str(pipeline), "--model", str(model), "--dtype", "float32",
           "--arena-pages", str(arena_pages), "--device", device]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *cmd], check=True, stdout=subprocess.PIPE, text=True,
                          stderr=subprocess.DEVNULL,
                          env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", QUAIL_ANSWER_STORE=str(STORE)))
    seconds = time.perf_counter() - start
    kept, topic = (json.loads(stats[name].read_text()) for name in ("kept", "topic"))
    documents = topic["document_tokens_computed"] + topic["tokens_reused"]["retention"] + topic["tokens_reused"]["prefix"]
    floor = topic["question_tokens_computed"]
    return {"rows": rows, "arena_pages": arena_pages, "seconds": round(seconds, 2),
            "rows_per_s": round(rows / seconds, 1), "peak_rss_mb": round(int(done.stdout.split()[-1]) / 1024),
            "filter_tokens_computed": kept["tokens_computed"], "classify_tokens_computed": topic["tokens_computed"],
            "classify_floor": floor, "classify_over_floor": round(topic["tokens_computed"] / floor, 3),
            "classify_retention": topic["tokens_reused"]["retention"],
            "classify_documents_reused": round(topic["tokens_reused"]["retention"] / max(documents, 1), 3),
            "tokens_computed": kept["tokens_computed"] + topic["tokens_computed"],
            "answers_reused": kept["tokens_reused"]["answers"] + topic["tokens_reused"]["answers"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="+", type=int)
    ap.add_argument("--arena-pages", type=int, default=1200)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rerun", action="store_true", help="then run again over the table with 1%% of rows changed")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.sizes:
        for path in OUT.glob(STORE.name + "*"):
            path.unlink()  # a cold store: the first run computes everything
        results.append(first := run(n, args.arena_pages, args.device))
        if args.rerun:
            again = run(n, args.arena_pages, args.device, changed(table(OUT / f"docs-{n}.parquet", n, "tiny")))
            again["rerun_tokens_share"] = round(again["tokens_computed"] / first["tokens_computed"], 4)
            again["rerun_time_share"] = round(again["seconds"] / first["seconds"], 3)
            results.append(again)
    for r in results:
        print(json.dumps(r))
    (OUT / f"reuse-results-{args.device}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
