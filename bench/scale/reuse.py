"""Does KV retention between two operators hold as the table grows? (issue 26)

`quail pipeline` with a filter (one predicate, `--threshold 0`, so every row passes) and a
classify of its output on the same column (3 labels), over random-word documents on the tiny
random Llama (bench/common/tiny.py), with a 1,200-page arena: the table is far larger than the
arena, so the classify finds its documents retained only if it runs on each window right after the filter.
Reports, per table size, the classify's tokens computed against its floor (the tokens of its
questions and labels alone: what it computes when every document comes from retention), the share
of its documents' tokens reused from retention, rows/s of the whole pipeline and its peak RSS.

Then, with `--rerun`, the next day's run: the same pipeline over the table with 1% of its rows
changed, with the answer store the first run filled. Reported: its tokens computed and its time
against the first run's.

    python -m bench scale reuse 2000 16000 128000
    python -m bench scale reuse --rerun 16000
    python -m bench scale reuse --device cuda --arena-pages 200000 1000000
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common.results import parser, write_json
from bench.common.tiny import PEAK_RSS, SCALE, random_words_table, tiny_model

STORE = SCALE / "answers.sqlite"


def changed(data: Path, share: float = 0.01) -> Path:
    """The table with every (1/share)-th row's text changed: the next day's data."""
    t = pq.read_table(data)
    step = round(1 / share)
    texts = [x + " storm" if i % step == 0 else x for i, x in enumerate(t.column("text").to_pylist())]
    out = data.with_name(data.stem + "-changed.parquet")
    pq.write_table(t.set_column(t.schema.get_field_index("text"), "text", pa.array(texts)), out)
    return out


def run(rows: int, arena_pages: int, device: str, data: Path | None = None) -> dict:
    data = data or random_words_table(rows)
    model = tiny_model()
    pipeline = SCALE / f"reuse-{rows}.yaml"
    outputs = {name: SCALE / f"reuse-{rows}-{name}.parquet" for name in ("kept", "topic")}
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
    reused = topic["tokens_reused"]
    documents = topic["document_tokens_computed"] + reused["retention"] + reused["sharing"]
    floor = topic["question_tokens_computed"]
    return {"rows": rows, "arena_pages": arena_pages, "seconds": round(seconds, 2),
            "rows_per_s": round(rows / seconds, 1), "peak_rss_mb": round(int(done.stdout.split()[-1]) / 1024),
            "filter_tokens_computed": kept["tokens_computed"], "classify_tokens_computed": topic["tokens_computed"],
            "classify_floor": floor, "classify_over_floor": round(topic["tokens_computed"] / floor, 3),
            "classify_retention": topic["tokens_reused"]["retention"],
            "classify_documents_reused": round(topic["tokens_reused"]["retention"] / max(documents, 1), 3),
            "tokens_computed": kept["tokens_computed"] + topic["tokens_computed"],
            "answers_reused": kept["tokens_reused"]["store"] + topic["tokens_reused"]["store"]}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, stem="scale-reuse")
    ap.add_argument("sizes", nargs="+", type=int)
    ap.add_argument("--arena-pages", type=int, default=1200)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rerun", action="store_true", help="then run again over the table with 1%% of rows changed")
    args = ap.parse_args(argv)
    SCALE.mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.sizes:
        for path in SCALE.glob(STORE.name + "*"):
            path.unlink()  # a cold store: the first run computes everything
        results.append(first := run(n, args.arena_pages, args.device))
        if args.rerun:
            again = run(n, args.arena_pages, args.device, changed(random_words_table(n)))
            again["rerun_tokens_share"] = round(again["tokens_computed"] / first["tokens_computed"], 4)
            again["rerun_time_share"] = round(again["seconds"] / first["seconds"], 3)
            results.append(again)
    for r in results:
        print(json.dumps(r))
    write_json(args, {"model": "tiny", "device": args.device, "arena_pages": args.arena_pages, "runs": results})
