"""A filter cascade on bench/data's person filter: the band comes from the dev half for each target
accuracy (planner/band.py, gold labels), then the held-out half is filtered by the cascade and
by the large model alone, at calibration auto (each model's own) and threshold 0.5. Reports
accuracy and F1 against the labels, the rows the large model took, and tokens and seconds per
model, as JSON and a .md table (the committed run: bench/results/cascade.json and .md).

    python -m bench e2e cascade [--small qwen2.5-coder-0.5b] [--large qwen2.5-coder-1.5b]
        [--targets 0.95 0.99]
"""

import time

from bench.common.labelled import FILTER_QUESTION, read
from bench.common.metrics import clean, f1, fmt
from bench.common.results import machine, parser, write_json


def scored(passed: list[bool], rows: list[dict]) -> dict:
    truth = [r["label"] == "yes" for r in rows]
    return {"accuracy": sum(p == t for p, t in zip(passed, truth)) / len(rows), "f1": f1(passed, truth),
            "said_yes": sum(passed)}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--small", default="qwen2.5-coder-0.5b")
    ap.add_argument("--large", default="qwen2.5-coder-1.5b")
    ap.add_argument("--targets", type=float, nargs="+", default=[0.95, 0.99])
    args = ap.parse_args(argv)

    from quail.planner.band import band_for
    from quail.runtime.cascade import cascade_filter
    from quail.session import Session
    from quail.specs import Cascade

    dev, heldout = read("filter.csv", "dev", None), read("filter.csv", "heldout", None)
    texts = [r["text"] for r in heldout]
    small = Session.open(args.small, "auto", device="cpu")
    large = small.cascade_model(args.large)
    sample, _ = small.filter([r["text"] for r in dev], [FILTER_QUESTION], 0.0)
    start = time.perf_counter()
    alone, stats = large.filter(texts, [FILTER_QUESTION], 0.5)
    doc = {"small": args.small, "large": args.large, "question": FILTER_QUESTION, "machine": machine(),
           "large_alone": scored(alone.passed, heldout) | {"tokens_computed": stats.tokens_computed,
                                                            "seconds": round(time.perf_counter() - start, 1)},
           "cascades": []}
    print(f"{args.large} alone: " + ", ".join(f"{k} {fmt(v)}" for k, v in doc["large_alone"].items()), flush=True)
    for target in args.targets:
        band = band_for(sample.p_yes, [r["label"] == "yes" for r in dev], target)
        start = time.perf_counter()
        result, escalated, stats = cascade_filter(small, Cascade(args.large, band.low, band.high), texts,
                                                  [FILTER_QUESTION], 0.5)
        run = {"target": target, "low": band.low, "high": band.high, "dev_answered": band.answered,
               "dev_rows": band.rows, "dev_accuracy": band.accuracy, "escalated": sum(escalated),
               "seconds": round(time.perf_counter() - start, 1), "tokens_computed": stats.tokens_computed,
               "by_model": stats.by_model} | scored(result.passed, heldout)
        doc["cascades"].append(clean(run))
        print(f"target {target}: " + ", ".join(f"{k} {fmt(v)}" for k, v in run.items() if k != "by_model"),
              flush=True)
    write_json(args, doc, markdown=markdown(doc))


def markdown(doc: dict) -> str:
    a = doc["large_alone"]
    lines = [f"# Cascade {doc['small']} -> {doc['large']}: \"{doc['question']}\", held-out half",
             "", f"Band from the dev half per target; {doc['machine']['cpu']}, {doc['machine']['threads']} threads.",
             "",
             "| run | band | dev: small answers (accuracy) | held-out: to large | accuracy | F1 | said yes | "
             "tokens small / large | seconds |", "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
             f"| {doc['large']} alone | - | - | all | {fmt(a['accuracy'])} | "
             f"{fmt(a['f1'])} | {a['said_yes']} | - / {a['tokens_computed']:,} | {a['seconds']} |"]
    for c in doc["cascades"]:
        small, large = (c["by_model"].get(doc[k], {}).get("tokens_computed", 0) for k in ("small", "large"))
        lines.append(f"| target {c['target']} | [{c['low']:.4f}, {c['high']:.4f}] | {c['dev_answered']}/"
                     f"{c['dev_rows']} ({fmt(c['dev_accuracy'])}) | {c['escalated']} | {fmt(c['accuracy'])} | "
                     f"{fmt(c['f1'])} | {c['said_yes']} | {small:,} / {large:,} | {c['seconds']} |")
    return "\n".join(lines) + "\n"
