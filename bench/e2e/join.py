"""A blocked join on FEBRL 4 (bench/common/febrl.py): each of N people's records against a shuffled
table of their N corrupted duplicates, with the gold pairs known.

For a recall target and for `candidates` 1, 3 and 10: the pairs asked as a share of the product,
the certified lower bound on recall against the full join (or the estimate, for candidates),
recall and precision against the gold pairs, and the wall time; asking every pair is timed on a
sample of pairs (every right row against a few left rows) and scaled to the product. The same
with all-MiniLM-L6-v2's vectors beside the model's own (`--embedding`).

    python -m bench e2e join --rows 1000 --model qwen2.5-coder-1.5b --condition-first
"""

import argparse
import time
from dataclasses import replace

import numpy as np

from bench.common.febrl import pairs
from bench.common.results import parser, write_json

CONDITION = "The two records describe the same person."
MODES = {"recall 0.9": {"recall_target": 0.9}, "candidates 1": {"candidates": 1}, "candidates 3": {"candidates": 3},
         "candidates 10": {"candidates": 10}}


def every_pair_seconds(session, left: list[str], right: list[str], rows: int, condition_first: bool) -> float:
    """Seconds to ask every pair, from `rows` left rows asked against every right row, scaled."""
    rng = np.random.default_rng(1)
    some = sorted(rng.choice(len(left), min(rows, len(left)), replace=False).tolist())
    started = time.perf_counter()
    session.join([left[i] for i in some], right, CONDITION, reuse=True, retain=None, calibration="auto",
                 partner="record", condition_first=condition_first)
    return (time.perf_counter() - started) * len(left) / len(some)


def run_mode(session, spec, left: list[str], right: list[str], partner: np.ndarray) -> dict:
    from quail.reuse import Reuse
    from quail.runtime.blocking import blocked_join

    rows = list(range(len(left)))
    started = time.perf_counter()
    result, asked, _, stats = blocked_join(session, spec, left, right, Reuse(), None, False, rows, rows)
    seconds = time.perf_counter() - started
    matched = {(i, j) for i, (js, ps) in enumerate(zip(asked, result.p_yes)) for j, p in zip(js, ps)
               if p >= spec.threshold}
    gold = {(i, int(partner[i])) for i in range(len(left))}
    b = stats.blocking
    return {"pairs": b["pairs"], "asked": b["asked"], "share_asked": round(b["asked"] / b["pairs"], 5),
            "recall_lower": round(b.get("recall_lower", b.get("recall_interval", [0])[0]), 4),
            "recall_estimate": b.get("recall_estimate"), "mode": b["mode"], "matched": len(matched),
            "gold_recall": round(len(matched & gold) / len(gold), 4),
            "gold_precision": round(len(matched & gold) / len(matched), 4) if matched else None,
            "seconds": round(seconds, 1), "tokens_computed": stats.tokens_computed}


def markdown(doc: dict) -> str:
    lines = [f"# A blocked join on FEBRL 4: {doc['rows']:,} x {doc['rows']:,} rows, {doc['model']}", "",
             f"Asking every pair: {doc['every_pair_seconds']:,.0f} s (timed on {doc['sample_rows']} left rows "
             f"against every right row, scaled).", "",
             "| vectors | mode | pairs asked | share | recall >= (certified or estimated) | gold recall | "
             "gold precision | seconds | of every pair's time |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["results"]:
        lines.append(f"| {r['vectors']} | {r['name']} | {r['asked']:,} | {r['share_asked']:.2%} | "
                     f"{r['recall_lower']:.3f} | {r['gold_recall']:.3f} | {r['gold_precision']} | {r['seconds']:,.0f} | "
                     f"{r['seconds'] / doc['every_pair_seconds']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, "join-febrl")
    ap.add_argument("--rows", type=int, default=1000, help="left rows, each with its duplicate on the right")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--condition-first", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--embedding", default=None, help="also with this sentence-transformers model's vectors")
    ap.add_argument("--sample-rows", type=int, default=4, help="left rows timed against every right row")
    args = ap.parse_args(argv)

    from quail.session import Session
    from quail.specs import OperatorSpec

    left, right, partner = pairs(args.rows)
    session = Session.open(args.model, dtype=args.dtype, device="cpu")
    base = OperatorSpec("join", "join", ("left", "right"), ("record", "record"), (CONDITION,),
                        right_name="record", condition_first=args.condition_first)
    doc = {"rows": args.rows, "model": args.model, "condition_first": args.condition_first,
           "sample_rows": args.sample_rows,
           "every_pair_seconds": every_pair_seconds(session, left, right, args.sample_rows, args.condition_first),
           "results": []}
    print(f"every pair: {doc['every_pair_seconds']:,.0f} s", flush=True)
    for embedding in [None] + ([args.embedding] if args.embedding else []):
        for name in args.modes:
            spec = replace(base, embedding=embedding, **MODES[name])
            r = {"vectors": embedding or f"{args.model}'s own", "name": name} | run_mode(session, spec, left, right,
                                                                                        partner)
            doc["results"].append(r)
            print(r, flush=True)
            write_json(args, doc, markdown=markdown(doc))


if __name__ == "__main__":
    main()
