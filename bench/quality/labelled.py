"""Quality of the embedded models on public labelled data: Wikipedia leads (bench/data, CC BY-SA 4.0;
its README says how they were made). For each model and calibration, on the CPU at dtype auto:

- filter "Is this article about a person?": accuracy and F1 at P(yes) >= 0.5, AUC, ECE over P(yes);
- classify into 5 topics: accuracy, macro F1, ECE of the top label's probability;
- join articles against short descriptions (or titles): AUC over all pairs, F1 of the pairs at
  P(yes) >= 0.5, and top-1 F1 (each article's highest-P(yes) row as its match);
- tokens computed and seconds per task.

ECE: 10 equal-width bins over [0, 1] (the last one closed). Results merge per model and calibration
into the output file (default bench/results/quality-SPLIT-YYYYMMDD.json, and .md), so models can be
run one at a time; `--output-json bench/results/quality-heldout.json` adds to the committed results.

    python -m bench quality labelled [MODEL ...] [--split dev|heldout] [--rows N]
        [--calibration none contextual] [--join-on description|title]
"""

import argparse
import time

import numpy as np

from bench.common.labelled import (
    CLASSIFY_QUESTION,
    FILTER_QUESTION,
    JOIN_CONDITIONS,
    MODELS,
    TASKS,
    TOPIC_DESCRIPTIONS,
    TOPICS,
    load,
)
from bench.common.metrics import classify_metrics, clean, filter_metrics, fmt, join_metrics
from bench.common.results import machine, output_path, parser, previous, write_json

# Choosing the default: a rule fixed before the held-out half was run (issue 15).

BARS = {"filter": ("accuracy", 0.95), "classify": ("accuracy", 0.85), "join": ("top1_f1", 0.80)}


def bars_met(result: dict) -> list[str]:
    """The tasks of one (model, calibration) result that reach their bar."""
    return [task for task, (metric, bar) in BARS.items() if (result.get(task) or {}).get(metric) is not None
            and result[task][metric] >= bar]


def choose_default(runs: dict) -> tuple[str, str, list[str]] | None:
    """(model, calibration, bars met): the smallest model, with a calibration, that meets all three
    bars; where none does, the one that meets the most, ties to the smaller model and then to no
    calibration (it costs a few prompts). Only results with all three tasks count. MODELS is in
    order of size. None where no result is complete."""
    complete = [(m, c, bars_met(r)) for m in MODELS for c in ("none", "contextual")
                if set(TASKS) <= set(r := runs.get(m, {}).get(c, {}))]
    if not complete:
        return None
    return max(complete, key=lambda x: (len(x[2]) == len(BARS), len(x[2]), -MODELS.index(x[0]), x[1] == "none"))




def timed(call):
    start = time.perf_counter()
    result, stats = call()
    return result, {"tokens_computed": stats.tokens_computed, "seconds": round(time.perf_counter() - start, 2)}


def measure(session, data: dict, calibration: str, join_on: str, tasks: list[str], descriptions: bool = False,
            condition_first: bool = False) -> dict:
    out = {}
    if "filter" in tasks:
        rows = data["filter"]
        r, cost = timed(lambda: session.filter([x["text"] for x in rows], [FILTER_QUESTION], threshold=0.0,
                                               calibration=calibration))
        out["filter"] = filter_metrics([p[0] for p in r.p_yes], [x["label"] == "yes" for x in rows]) | cost | {
            "question": FILTER_QUESTION}
    if "classify" in tasks:
        rows = data["classify"]
        c, cost = timed(lambda: session.classify([x["text"] for x in rows], TOPICS, CLASSIFY_QUESTION,
                                                 calibration=calibration, descriptions=tuple(
                                                     TOPIC_DESCRIPTIONS[t] for t in TOPICS) if descriptions else ()))
        out["classify"] = classify_metrics(c.probabilities, [TOPICS.index(x["topic"]) for x in rows]) | cost
    if "join" in tasks:
        j, cost = timed(lambda: session.join(data["join_left"], data["join_right"], JOIN_CONDITIONS[join_on],
                                             calibration=calibration, partner=join_on,
                                             condition_first=condition_first))
        p = np.asarray(j.p_yes, float)[:, data["join_truth"]]  # columns in the articles' order: truth on the diagonal
        out["join"] = join_metrics(p) | {"on": join_on, "right_name": join_on,
                                         "layout": "condition first" if condition_first else "condition last"} | cost
    return out


def markdown(doc: dict) -> str:
    runs = [(m, c, r) for m, by in doc["runs"].items() for c, r in by.items()]
    lines = [f"# Quality on bench/data, split {doc['split']}" + (f", first {doc['rows']} rows" if doc["rows"] else ""),
             "", "Written by `python -m bench quality labelled`; data and labels: bench/data/README.md. "
             "ECE: 10 equal-width bins.", ""]
    tables = [
        ("Filter: \"" + FILTER_QUESTION + "\"", "filter",
         ["rows", "positives", "said_yes", "accuracy", "f1", "auc", "ece"]),
        ("Classify: 5 topics", "classify", ["rows", "accuracy", "macro_f1", "ece"]),
        ("Join: each article against every description (or title)", "join",
         ["left", "right", "auc", "pair_f1", "pairs_said_yes", "top1_f1"]),
    ]
    for title, task, keys in tables:
        lines += [f"## {title}", "", "| model | calibration | " + " | ".join(keys) + " | tokens | seconds |",
                  "| --- | --- |" + " ---: |" * (len(keys) + 2)]
        for model, cal, r in runs:
            if task not in r:
                continue
            t = r[task]
            old = task == "join" and "right_name" not in t  # measured before joins named their right rows
            note = ' (labels "Second document:")' if old else ""
            lines.append(f"| {model} | {cal}{note} | "
                         + " | ".join(fmt(t[k]) for k in keys)
                         + f" | {t['tokens_computed']:,} | {t['seconds']:.1f} |")
        lines.append("")
    if chosen := choose_default(doc["runs"]):
        model, cal, met = chosen
        lines += [f"By the rule in `choose_default` (bars: filter accuracy 0.95, classify accuracy 0.85, join top-1 "
                  f"F1 0.80): **{model}, calibration {cal}**, which meets {len(met)} of 3 "
                  f"({', '.join(met) or 'none'}).",
                  ""]
    lines += ["Classify errors, true topic -> answered topic (count):", ""]
    for model, cal, r in runs:
        if "confusion" in r.get("classify", {}):
            c = r["classify"]["confusion"]
            errors = sorted(((c[t][p], t, p) for t in range(len(c)) for p in range(len(c)) if t != p and c[t][p]),
                            key=lambda e: (-e[0], e[1], e[2]))
            lines.append(f"- {model}, {cal}: " + (", ".join(f"{TOPICS[t]} -> {TOPICS[p]} {n}" for n, t, p in errors)
                                                  or "none"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__, stem="quality")
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--split", default="dev", choices=["dev", "heldout"])
    ap.add_argument("--rows", type=int, default=None, help="at most N rows of each set (a smoke run)")
    ap.add_argument("--calibration", nargs="+", default=["none", "contextual"], choices=["none", "contextual"])
    ap.add_argument("--join-on", default="description", choices=list(JOIN_CONDITIONS))
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS),
                    help="measure only these (the others keep their earlier results)")
    ap.add_argument("--descriptions", action="store_true",
                    help="the classify's labels with their descriptions (TOPIC_DESCRIPTIONS); results under "
                         "'<calibration> + descriptions'")
    ap.add_argument("--condition-first", action=argparse.BooleanOptionalAction, default=True,
                    help="the join's condition before each right row (once per left row), Quail's default; "
                         "results under '<calibration> + condition first' (without: the condition after each pair)")
    args = ap.parse_args(argv)

    from quail.model.registry import installed
    from quail.session import Session

    data = load(args.split, args.rows, args.join_on)
    stem = f"quality-{args.split}" + (f"-rows{args.rows}" if args.rows else "")
    doc = previous(args, stem) or {"split": args.split, "rows": args.rows, "runs": {}}
    if (doc["split"], doc["rows"]) != (args.split, args.rows):
        raise SystemExit(f"{output_path(args, stem)} holds split {doc['split']}, rows {doc['rows']}: not this run's")
    for name in args.models:
        if not installed(name):
            print(f"{name}: not installed, skipped", flush=True)
            continue
        session = Session.open(name, "auto", device="cpu")
        for calibration in args.calibration:
            key = calibration + (" + descriptions" if args.descriptions else "") \
                + (" + condition first" if args.condition_first else "")
            print(f"{name}, calibration {key}:", flush=True)
            result = doc["runs"].get(name, {}).get(key, {}) | measure(session, data, calibration, args.join_on,
                                                                       args.tasks, args.descriptions,
                                                                       args.condition_first)
            result["machine"] = machine()
            result["dtype"] = str(session.engine.model.dtype)
            for task in args.tasks:
                print(f"  {task}: " + ", ".join(f"{k} {fmt(v)}" for k, v in result[task].items()
                                                 if k not in ("on", "right_name", "question", "confusion", "layout")), flush=True)
            doc["runs"].setdefault(name, {})[key] = clean(result)
            write_json(args, doc, stem, markdown(doc))  # after every run: a long one keeps what it has
