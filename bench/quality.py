"""Quality of the embedded models on public labelled data: Wikipedia leads (bench/data, CC BY-SA 4.0;
its README says how they were made). For each model and calibration, on the CPU at dtype auto:

- filter "Is this article about a person?": accuracy and F1 at P(yes) >= 0.5, AUC, ECE over P(yes);
- classify into 5 topics: accuracy, macro F1, ECE of the top label's probability;
- join articles against short descriptions (or titles): AUC over all pairs, F1 of the pairs at
  P(yes) >= 0.5, and top-1 F1 (each article's highest-P(yes) row as its match);
- tokens computed and seconds per task.

ECE: 10 equal-width bins over [0, 1] (the last one closed). Results merge per model and calibration
into bench/results/quality-SPLIT.json and .md, so models can be run one at a time; a run with
--rows N (a smoke run) goes to quality-SPLIT-rowsN.* instead.

    .venv/bin/python bench/quality.py [MODEL ...] [--split dev|heldout] [--rows N]
        [--calibration none contextual] [--join-on description|title]
"""

import argparse
import csv
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results"
MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
TASKS = ["filter", "classify", "join"]
FILTER_QUESTION = "Is this article about a person?"  # the label: Wikipedia files it under People
TOPICS = ["arts", "biology and health", "geography", "history", "technology"]
CLASSIFY_QUESTION = "Which topic is this article about?"
# --descriptions: what each topic covers, written from the topics' names before any run with them
TOPIC_DESCRIPTIONS = {
    "arts": "painting, sculpture, music, film, literature, theatre, dance, and the people who make them",
    "biology and health": "living things, the body, medicine, disease and health",
    "geography": "places, countries, cities, rivers, mountains, climate and populations",
    "history": "past events, wars, empires, dynasties, revolutions and historical figures",
    "technology": "machines, computers, software, engineering, inventions and industry",
}
JOIN_CONDITIONS = {  # the right column's name is the prompt's name for a right row, as in the CLI
    "description": "The description is the short description of the subject of the document.",
    "title": "The title is the title of the document.",
}


# Metrics: pure functions of numpy arrays, tested in tests/test_quality_metrics.py. nan where undefined.

def auc(scores, truth) -> float:
    """The probability that a true item scores above a false one, ties counting half (Mann-Whitney)."""
    scores, truth = np.asarray(scores, float), np.asarray(truth, bool)
    pos, neg = scores[truth], scores[~truth]
    if not len(pos) or not len(neg):
        return float("nan")
    return float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))


def f1(predicted, truth) -> float:
    """F1 of the positive class: 2TP / (2TP + FP + FN)."""
    predicted, truth = np.asarray(predicted, bool), np.asarray(truth, bool)
    tp = np.sum(predicted & truth)
    wrong = np.sum(predicted != truth)
    return float(2 * tp / (2 * tp + wrong)) if 2 * tp + wrong else float("nan")


def macro_f1(predicted, truth) -> float:
    """The mean of each label's F1 over the labels that occur in the truth or the predictions."""
    predicted, truth = np.asarray(predicted), np.asarray(truth)
    labels = np.union1d(predicted, truth)
    return float(np.mean([f1(predicted == k, truth == k) for k in labels]))


def ece(confidence, correct, bins: int = 10) -> float:
    """Expected calibration error: sum over equal-width bins of |mean confidence - share correct|,
    weighted by the bin's share of the items. For a yes/no question, confidence = P(yes) and
    correct = the truth is yes."""
    confidence, correct = np.asarray(confidence, float), np.asarray(correct, float)
    if not len(confidence):
        return float("nan")
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    return float(sum(abs(confidence[which == b].mean() - correct[which == b].mean()) * np.mean(which == b)
                     for b in range(bins) if np.any(which == b)))


def top1(p_yes) -> tuple[float, float, float]:
    """(precision, recall, F1) of matching each left row to its highest-P(yes) right row, when the
    true match of left row i is right row i: precision = correct / predicted, recall = correct / rows."""
    p = np.asarray(p_yes, float)
    if not p.size:
        return float("nan"), float("nan"), float("nan")
    correct = int(np.sum(np.argmax(p, axis=1) == np.arange(len(p))))
    precision = recall = correct / len(p)  # every left row predicts exactly one match
    return precision, recall, (2 * precision * recall / (precision + recall) if correct else 0.0)


def filter_metrics(p_yes, truth) -> dict:
    p, truth = np.asarray(p_yes, float), np.asarray(truth, bool)
    return {"rows": len(p), "positives": int(truth.sum()), "said_yes": int(np.sum(p >= 0.5)),
            "accuracy": float(np.mean((p >= 0.5) == truth)), "f1": f1(p >= 0.5, truth), "auc": auc(p, truth),
            "ece": ece(p, truth)}


def classify_metrics(probabilities, truth) -> dict:
    probs, truth = np.asarray(probabilities, float), np.asarray(truth)
    predicted = np.argmax(probs, axis=1)
    confusion = np.zeros((probs.shape[1],) * 2, int)
    np.add.at(confusion, (truth, predicted), 1)
    return {"rows": len(probs), "accuracy": float(np.mean(predicted == truth)), "macro_f1": macro_f1(predicted, truth),
            "ece": ece(probs.max(axis=1), predicted == truth), "confusion": confusion.tolist()}


def join_metrics(p_yes) -> dict:
    """p_yes[i][j]: left row i against right row j, whose true match is j == i."""
    p = np.asarray(p_yes, float)
    truth = np.eye(len(p), p.shape[1] if p.ndim == 2 else 0, dtype=bool)
    precision, recall, top1_f1 = top1(p)
    return {"left": len(p), "right": truth.shape[1], "auc": auc(p.ravel(), truth.ravel()),
            "pair_f1": f1(p.ravel() >= 0.5, truth.ravel()), "pairs_said_yes": int(np.sum(p >= 0.5)),
            "top1_precision": precision, "top1_recall": recall, "top1_f1": top1_f1}


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
                if set(TASKS) <= set((r := runs.get(m, {}).get(c, {})))]
    if not complete:
        return None
    return max(complete, key=lambda x: (len(x[2]) == len(BARS), len(x[2]), -MODELS.index(x[0]), x[1] == "none"))


# Data and runs

def read(name: str, split: str, rows: int | None) -> list[dict]:
    with open(DATA / name, newline="", encoding="utf-8") as f:
        got = [r for r in csv.DictReader(f) if r["split"] == split]
    return got[:rows] if rows else got


def load(split: str, rows: int | None, join_on: str) -> dict:
    articles = read("join_articles.csv", split, rows)
    ids = {a["id"] for a in articles}
    right = [r for r in read("join_titles.csv", split, None) if r["id"] in ids]  # the file's own (shuffled) order
    where = {r["id"]: j for j, r in enumerate(right)}
    return {"filter": read("filter.csv", split, rows), "classify": read("classify.csv", split, rows),
            "join_left": [a["text"] for a in articles], "join_right": [r[join_on] for r in right],
            "join_truth": [where[a["id"]] for a in articles]}


def timed(call):
    start = time.perf_counter()
    result, stats = call()
    return result, {"tokens_computed": stats.tokens_computed, "seconds": round(time.perf_counter() - start, 2)}


def measure(session, data: dict, calibration: str, join_on: str, tasks: list[str], descriptions: bool = False) -> dict:
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
                                             calibration=calibration, partner=join_on))
        p = np.asarray(j.p_yes, float)[:, data["join_truth"]]  # columns in the articles' order: truth on the diagonal
        out["join"] = join_metrics(p) | {"on": join_on, "right_name": join_on} | cost
    return out


def machine() -> dict:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__}


# Output

def fmt(x) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.3f}" if isinstance(x, float) else f"{x:,}"


def markdown(doc: dict) -> str:
    runs = [(m, c, r) for m, by in doc["runs"].items() for c, r in by.items()]
    lines = [f"# Quality on bench/data, split {doc['split']}" + (f", first {doc['rows']} rows" if doc["rows"] else ""),
             "", "Written by bench/quality.py; data and labels: bench/data/README.md. ECE: 10 equal-width bins.", ""]
    tables = [
        ("Filter: \"" + FILTER_QUESTION + "\"", "filter", ["rows", "positives", "said_yes", "accuracy", "f1", "auc", "ece"]),
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
                  f"F1 0.80): **{model}, calibration {cal}**, which meets {len(met)} of 3 ({', '.join(met) or 'none'}).",
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


def clean(x):
    """nan -> None, for JSON."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    return None if isinstance(x, float) and np.isnan(x) else x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = ap.parse_args()

    from quail.model.registry import installed
    from quail.session import Session

    data = load(args.split, args.rows, args.join_on)
    stem = f"quality-{args.split}" + (f"-rows{args.rows}" if args.rows else "")
    out = RESULTS / f"{stem}.json"
    doc = json.loads(out.read_text()) if out.exists() else {"split": args.split, "rows": args.rows, "runs": {}}
    for name in args.models:
        if not installed(name):
            print(f"{name}: not installed, skipped", flush=True)
            continue
        session = Session.open(name, "auto", device="cpu")
        for calibration in args.calibration:
            key = calibration + (" + descriptions" if args.descriptions else "")
            print(f"{name}, calibration {key}:", flush=True)
            result = doc["runs"].get(name, {}).get(key, {}) | measure(session, data, calibration, args.join_on,
                                                                       args.tasks, args.descriptions)
            result["machine"] = machine()
            result["dtype"] = str(session.engine.model.dtype)
            for task in args.tasks:
                print(f"  {task}: " + ", ".join(f"{k} {fmt(v)}" for k, v in result[task].items()
                                                 if k not in ("on", "right_name", "question", "confusion")), flush=True)
            doc["runs"].setdefault(name, {})[key] = clean(result)
            RESULTS.mkdir(exist_ok=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")
            out.with_suffix(".md").write_text(markdown(doc))
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
