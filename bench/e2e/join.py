"""A blocked join on FEBRL 4 (bench/common/febrl.py): each of N people's records against a shuffled
table of their N corrupted duplicates, with the gold pairs known.

For a recall target and for `candidates` 1, 3 and 10: the pairs asked as a share of the product,
the certified lower bound on recall against the full join (or the estimate, for candidates),
recall and precision against the gold pairs, the tokens and the wall time. Asking every pair is
timed on a few left rows against every right row and scaled to the product: the first row pays
the calibration's probes of every right row (once per right row in the full join too), the others
find them known. The same with a sentence-transformers model's vectors beside the model's own
(`--embedding`), and each source's candidate recall at k, from its vectors alone.

The modes share one answer store (`--answer-store`): the first mode's wall time is its own, a later
mode finds the pairs an earlier one asked stored (its time alone is the first mode's scaled by
their tokens without reuse, which the store does not change: a stored pair's tokens would count
its whole document, where computing it rewinds to it). On a CPU the 1,000-row join takes hours, so the pairs are asked in calls of
`--pairs-per-call` (whole left rows, stored as each call ends) and a run stopped between calls
resumes where it stopped: the time and tokens of the calls before are kept in a ledger beside the
store and added in. The figures are those of one uninterrupted run, less the work lost at a stop
(nothing, stopped right after a call's line).

    python -m bench e2e join --rows 1000 --model qwen2.5-coder-1.5b
"""

import argparse
import inspect
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.common.febrl import pairs
from bench.common.results import OUT, parser, write_json

CONDITION = "The two records describe the same person."
MODES = {"recall 0.9": {"recall_target": 0.9}, "candidates 1": {"candidates": 1}, "candidates 3": {"candidates": 3},
         "candidates 10": {"candidates": 10}}


class Ledger:
    """What the stopped runs of one benchmark spent, by step: seconds, tokens computed, and results
    already final (a JSON file written whole after every call)."""

    def __init__(self, path: Path):
        self.path = path
        self.steps: dict[str, dict] = json.loads(path.read_text()) if path.exists() else {}

    def spent(self, step: str) -> dict:
        return self.steps.setdefault(step, {"seconds": 0.0, "tokens_computed": 0, "calls": 0})

    def add(self, step: str, seconds: float, tokens: int) -> None:
        s = self.spent(step)
        s["seconds"] += seconds
        s["tokens_computed"] += tokens
        s["calls"] = s.get("calls", 0) + 1
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.steps, indent=1))
        os.replace(tmp, self.path)


def in_calls(session, size: int, ledger: Ledger) -> dict:
    """Makes `session.join` ask its pairs in calls of about `size` pairs (whole left rows), each
    call's time and tokens added to the ledger under `step["name"]` as it ends, and the same for
    each `session.vectors` call."""
    from quail.executor.stats import Stats
    from quail.ops.join import JoinResult

    join, vectors = session.join, session.vectors
    signature, step = inspect.signature(type(session).join), {"name": None}

    def record(what: str, started: float, tokens: int) -> None:
        if step["name"] is not None:
            seconds = time.perf_counter() - started
            ledger.add(step["name"], seconds, tokens)
            print(f"  {step['name']}: {what} in {seconds:.0f} s, {tokens:,} tokens computed", flush=True)

    def called(*args, **kwargs):
        bound = signature.bind(session, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        rows = a["pairs"] if a["pairs"] is not None else [list(range(len(a["right"])))] * len(a["left"])
        calls: list[list[int]] = []
        size_now = size
        for i in (i for i, row in enumerate(rows) if row):
            if size_now >= size:
                calls.append([])
                size_now = 0
            calls[-1].append(i)
            size_now += len(rows[i])
        result, stats = JoinResult([[] for _ in rows]), Stats()
        bias = a["bias"] if a["bias"] is not None else {}  # each right row's probes once over the calls
        for call in calls:
            started = time.perf_counter()
            part = set(call)
            r, s = join(**{k: v for k, v in a.items() if k != "self"}
                        | {"pairs": [row if i in part else [] for i, row in enumerate(rows)], "bias": bias})
            for i in call:
                result.p_yes[i] = r.p_yes[i]
            stats.merge(s)
            record(f"{sum(len(rows[i]) for i in call):,} pairs", started, s.tokens_computed)
        return result, stats

    def read(*args, **kwargs):
        started = time.perf_counter()
        out = vectors(*args, **kwargs)
        record("vectors", started, out[1].tokens_computed)
        return out

    session.join, session.vectors = called, read
    return step


def every_pair_seconds(session, left: list[str], right: list[str], rows: int, ledger: Ledger, step: dict) -> dict:
    """Seconds to ask every pair: `rows` left rows against every right row (the store off), the
    first paying the calibration's probes, scaled to the product."""
    done = ledger.steps.get("every pair", {}).get("result")
    if done:
        return done
    store, session.store = session.store, None
    rng = np.random.default_rng(1)
    some = sorted(rng.choice(len(left), min(rows, len(left)), replace=False).tolist())
    bias: dict[int, float] = {}
    seconds = []
    for i in some:
        step["name"] = f"every pair, left row {i}"
        spent = ledger.spent(step["name"])
        if not spent.get("done"):  # a row stopped part way is timed again whole (the store is off)
            spent["seconds"], spent["tokens_computed"], spent["calls"] = 0.0, 0, 0
            session.join([left[i]], right, CONDITION, reuse=True, retain=None, calibration="auto", partner="record",
                         bias=bias)
            spent["done"] = True
            ledger.save()
        seconds.append(spent["seconds"])
    session.store = store
    first, rest = seconds[0], seconds[1:] or seconds
    result = {"seconds": first + float(np.mean(rest)) * (len(left) - 1), "first_row_seconds": first,
              "row_seconds": float(np.mean(rest)), "rows": len(some)}
    ledger.spent("every pair")["result"] = result
    ledger.save()
    return result


def run_mode(session, spec, left: list[str], right: list[str], partner: np.ndarray, ledger: Ledger,
             step: dict) -> dict:
    from quail.reuse import Reuse
    from quail.runtime.blocking import blocked_join

    rows = list(range(len(left)))
    step["name"] = f"{spec.embedding or 'own'}: {step['mode']}"
    before = dict(ledger.spent(step["name"]))
    started = time.perf_counter()
    result, asked, _, stats = blocked_join(session, spec, left, right, Reuse(), None, False, rows, rows)
    seconds = time.perf_counter() - started
    spent = ledger.spent(step["name"])
    # the calls of this run are in the ledger already; the rest of this run (scoring, sampling) is not
    seconds_total = before["seconds"] + seconds
    matched = {(i, j) for i, (js, ps) in enumerate(zip(asked, result.p_yes)) for j, p in zip(js, ps)
               if p >= spec.threshold}
    gold = {(i, int(partner[i])) for i in range(len(left))}
    b = stats.blocking
    return {"pairs": b["pairs"], "asked": b["asked"], "share_asked": round(b["asked"] / b["pairs"], 5),
            "recall_lower": round(b.get("recall_lower", b.get("recall_interval", [0])[0]), 4),
            "recall_estimate": b.get("recall_estimate"), "mode": b["mode"], "matched": len(matched),
            "gold_recall": round(len(matched & gold) / len(gold), 4),
            "gold_precision": round(len(matched & gold) / len(matched), 4) if matched else None,
            "seconds": round(seconds_total, 1),
            "tokens_computed": spent["tokens_computed"], "tokens_naive": stats.tokens_naive,
            "blocking": {k: v for k, v in b.items() if k != "tries"}}


def candidate_recall(session, spec, left: list[str], right: list[str], partner: np.ndarray) -> dict:
    """Per left row, whether its gold match is among its k best-scoring right rows (the centred
    cosines a blocked join by `spec` scores the product by), from the vectors alone."""
    from quail.reuse import Reuse
    from quail.runtime.blocking import scored_product

    rows = list(range(len(left)))
    product, _ = scored_product(session, spec, left, right, Reuse(), None, False, rows, rows)
    out = {}
    for k in (1, 3, 10):
        best = product.best(k)
        out[f"recall_at_{k}"] = round(float(np.mean([partner[i] in best[i] for i in rows])), 4)
    return out


def markdown(doc: dict) -> str:
    every = doc["every_pair"]["seconds"]
    lines = [f"# A blocked join on FEBRL 4: {doc['rows']:,} x {doc['rows']:,} rows, {doc['model']}", "",
             f"Asking every pair: {every:,.0f} s (timed on {doc['every_pair']['rows']} left rows "
             f"against every right row, scaled). A mode after the first finds the pairs an earlier one asked in the "
             "answer store: its seconds alone are the first mode's seconds scaled by its tokens without reuse.",
             "",
             "| vectors | mode | pairs asked | share | recall >= (certified or estimated) | gold recall | "
             "gold precision | tokens computed | seconds | seconds alone | of every pair's time |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["results"]:
        lines.append(f"| {r['vectors']} | {r['name']} | {r['asked']:,} | {r['share_asked']:.2%} | "
                     f"{r['recall_lower']:.3f} | {r['gold_recall']:.3f} | {r['gold_precision']} | "
                     f"{r['tokens_computed']:,} | {r['seconds']:,.0f} | {r['seconds_alone']:,.0f} | "
                     f"{r['seconds_alone'] / every:.3f} |")
    if doc.get("candidate_recall"):
        lines += ["", "Candidate recall (the gold match among a left row's k best right rows, vectors alone):", "",
                  "| vectors | at 1 | at 3 | at 10 |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {r['recall_at_1']} | {r['recall_at_3']} | {r['recall_at_10']} |"
                  for name, r in doc["candidate_recall"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, "join-febrl")
    ap.add_argument("--rows", type=int, default=1000, help="left rows, each with its duplicate on the right")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--condition-first", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--embedding", default=None, help="also with this sentence-transformers model's vectors")
    ap.add_argument("--sample-rows", type=int, default=2, help="left rows timed against every right row")
    ap.add_argument("--answer-store", type=Path, default=None,
                    help="the modes' answer store, and its ledger beside it (default: out/join-febrl-ROWS.sqlite)")
    ap.add_argument("--pairs-per-call", type=int, default=512, help="pairs asked (and stored) per call")
    args = ap.parse_args(argv)

    from quail.session import Session
    from quail.specs import OperatorSpec
    from quail.store import open_store

    store_path = args.answer_store or OUT / f"join-febrl-{args.rows}.sqlite"
    store_path.parent.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(store_path.with_suffix(".ledger.json"))
    left, right, partner = pairs(args.rows)
    session = Session.open(args.model, dtype=args.dtype, device="cpu")
    session.store = open_store(str(store_path.absolute()))
    step = in_calls(session, args.pairs_per_call, ledger)
    base = OperatorSpec("join", "join", ("left", "right"), ("record", "record"), (CONDITION,),
                        right_name="record", condition_first=args.condition_first)
    doc = {"rows": args.rows, "model": args.model, "condition_first": args.condition_first,
           "pairs_per_call": args.pairs_per_call, "results": [], "candidate_recall": {}}
    for embedding in [None] + ([args.embedding] if args.embedding else []):
        for name in args.modes:
            step["mode"] = name
            spec = replace(base, embedding=embedding, **MODES[name])
            r = {"vectors": embedding or f"{args.model}'s own", "name": name} | run_mode(session, spec, left, right,
                                                                                        partner, ledger, step)
            doc["results"].append(r)
            print({k: v for k, v in r.items() if k != "blocking"}, flush=True)
        step["name"] = None
        doc["candidate_recall"][embedding or f"{args.model}'s own"] = candidate_recall(
            session, replace(base, embedding=embedding, candidates=1), left, right, partner)
    doc["every_pair"] = every_pair_seconds(session, left, right, args.sample_rows, ledger, step)
    first = doc["results"][0]  # found nothing stored: its seconds per token without reuse set the others'
    for r in doc["results"]:
        r["seconds_alone"] = round(first["seconds"] * r["tokens_naive"] / first["tokens_naive"], 1)
    print(f"every pair: {doc['every_pair']['seconds']:,.0f} s", flush=True)
    write_json(args, doc, markdown=markdown(doc))


if __name__ == "__main__":
    main()
