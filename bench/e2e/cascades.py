"""Each kind's cascade with a guarantee, against its larger model alone, on bench/data's held-out
half: the person filter, the 5-topic classify and the description join (the first --join-rows
articles against their descriptions). The small model answers every row (pair); its band is chosen
in the run for --target on a seeded sample of --sample rows (pairs) that the larger model labels,
as `quail filter|classify|join --cascade-target` does; the rows inside it go to the larger model.
Reports the accuracy against the gold labels and against the larger model alone, the rows (pairs)
sent on, and tokens and seconds per run, as JSON and a .md table (the committed run:
bench/results/cascades.json and .md). A run of some --kinds into an existing file keeps the others'.

    python -m bench e2e cascades [--small qwen2.5-coder-0.5b] [--large qwen2.5-coder-1.5b]
"""

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common.labelled import CLASSIFY_QUESTION, FILTER_QUESTION, JOIN_CONDITIONS, TOPICS, load
from bench.common.metrics import clean, fmt, top1
from bench.common.results import machine, parser, previous, write_json


def _agreement(a: list, b: list) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--small", default="qwen2.5-coder-0.5b")
    ap.add_argument("--large", default="qwen2.5-coder-1.5b")
    ap.add_argument("--target", type=float, default=0.9, help="accuracy against the larger model")
    ap.add_argument("--delta", type=float, default=0.05)
    ap.add_argument("--sample", type=int, default=40, help="rows (a join: pairs) the larger model labels")
    ap.add_argument("--join-rows", type=int, default=12)
    ap.add_argument("--kinds", nargs="+", default=["filter", "classify", "join"])
    ap.add_argument("--rows", type=int, help="the first N held-out rows of each set (a quick run)")
    args = ap.parse_args(argv)

    from quail.runtime.cascade import cascade_classify, cascade_filter, cascade_join
    from quail.session import Session
    from quail.specs import Cascade
    from quail.store.sqlite import SqliteStore

    data = load("heldout", args.rows, "description")
    small = Session.open(args.small, "auto", device="cpu")
    large = small.cascade_model(args.large)
    cascade = Cascade(args.large, metric="accuracy", target=args.target, delta=args.delta, sample=args.sample)
    scratch = tempfile.TemporaryDirectory()
    doc = {"small": args.small, "large": args.large, "target": args.target, "delta": args.delta,
           "sample": args.sample, "machine": machine(), "kinds": {}}

    def compared(alone_run, cascade_run, answers, scored) -> dict:
        """The larger model alone (without an answer store), then the cascade as the CLI runs it:
        with a fresh store, where the rows the larger model labelled for the band are found again
        if sent on. `answers`: a result's answers, compared one by one; `scored`: against gold."""
        small.store = large.store = None
        start = time.perf_counter()
        alone, a_stats = alone_run()
        a_s = round(time.perf_counter() - start, 1)
        small.store = large.store = SqliteStore(Path(scratch.name) / f"{time.monotonic_ns()}.sqlite")
        start = time.perf_counter()
        got, sent, c_stats = cascade_run()
        c_s = round(time.perf_counter() - start, 1)
        return {"alone": scored(alone) | {"tokens": a_stats.tokens_computed, "seconds": a_s},
                "cascade": scored(got) | {"agrees_with_large": _agreement(answers(got), answers(alone)),
                                          "sent": sum(sent) if isinstance(sent, list) else len(sent),
                                          "tokens": c_stats.tokens_computed, "seconds": c_s,
                                          "band": [c_stats.guarantee["low"], c_stats.guarantee["high"]],
                                          "by_model": c_stats.by_model}}

    if "filter" in args.kinds:
        rows = data["filter"]
        texts, gold = [r["text"] for r in rows], [r["label"] == "yes" for r in rows]
        doc["kinds"]["filter"] = {"rows": len(rows)} | compared(
            lambda: large.filter(texts, [FILTER_QUESTION], 0.5),
            lambda: cascade_filter(small, cascade, texts, [FILTER_QUESTION], 0.5),
            lambda r: r.passed, lambda r: {"accuracy": _agreement(r.passed, gold)})
    if "classify" in args.kinds:
        rows = data["classify"]
        texts, gold = [r["text"] for r in rows], [TOPICS.index(r["topic"]) for r in rows]
        doc["kinds"]["classify"] = {"rows": len(rows)} | compared(
            lambda: large.classify(texts, TOPICS, CLASSIFY_QUESTION),
            lambda: cascade_classify(small, cascade, texts, TOPICS, CLASSIFY_QUESTION),
            lambda r: r.labels, lambda r: {"accuracy": _agreement(r.labels, gold)})
    if "join" in args.kinds:
        n = args.join_rows
        left, truth = data["join_left"][:n], data["join_truth"][:n]
        right = [data["join_right"][j] for j in truth]  # the articles' own descriptions, in their order
        cond = JOIN_CONDITIONS["description"]

        def scored(r) -> dict:
            p = np.asarray(r.p_yes, float)
            return {"top1_f1": top1(p)[2], "pairs_said_yes": int(np.sum(p >= 0.5))}

        doc["kinds"]["join"] = {"rows": f"{n} x {n} pairs"} | compared(
            lambda: large.join(left, right, cond, partner="description"),
            lambda: cascade_join(small, cascade, left, right, cond, 0.5, partner="description"),
            lambda r: [p >= 0.5 for row in r.p_yes for p in row], scored)
    for kind, run in doc["kinds"].items():
        print(kind, json.dumps(clean(run)), flush=True)
    doc["kinds"] = previous(args).get("kinds", {}) | doc["kinds"]  # a run of some kinds keeps the others'
    write_json(args, clean(doc), markdown=markdown(doc))


def markdown(doc: dict) -> str:
    lines = [f"# Cascades {doc['small']} -> {doc['large']}, held-out half: accuracy >= {doc['target']} against "
             f"the larger model, delta {doc['delta']}, {doc['sample']} sample rows (pairs)", "",
             "| kind | rows | large alone: gold | cascade: gold | cascade = large | sent on | band | "
             "tokens large alone / cascade | seconds large alone / cascade |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for kind, run in doc["kinds"].items():
        a, c = run["alone"], run["cascade"]
        metric = "top1_f1" if kind == "join" else "accuracy"
        lines.append(f"| {kind} | {run['rows']} | {fmt(a[metric])} | {fmt(c[metric])} | {fmt(c['agrees_with_large'])} "
                     f"| {c['sent']} | [{c['band'][0]:.3f}, {c['band'][1]:.3f}] | {a['tokens']:,} / {c['tokens']:,} "
                     f"| {a['seconds']} / {c['seconds']} |")
    return "\n".join(lines) + "\n"
