"""Quail against what a user would otherwise write (bench/common/systems.py), in one process, on the
same documents, prompts and decision rules. Repeats are interleaved (every system once, then again),
so that the ratios hold on a noisy machine.

    python -m bench e2e suite [--size bench|full|smoke] [--only W1,W4] [--repeats 3]

W1: a three-predicate filter (chain mode) over reference documents of 250-300 tokens
(bench/common/documents.py). W2: a two-predicate filter over the rows of one agent trace, each row the
previous one plus a turn. W3: a join of product reviews against products. W4: the pipeline of
issue 3: a two-predicate filter, then a classify, a join and a second join with the same anchor,
the later operators on the rows Quail's filter kept (Quail retains their KV across operators).
Thresholds: the median P(yes) of Quail's run (between two rows), so about half the rows or pairs pass.

`--size full` has the issue's sizes; `--size bench` (`make bench`) is cut to fit 15 minutes on
2 cores; `--size smoke` checks that everything runs. Writes JSON and a .md table (default
bench/results/suite-SIZE-YYYYMMDD.json); with --only, the other workloads keep their results from
that file (`--output-json bench/results/suite-bench.json --only W1` reruns W1 in the committed one).
"""

import importlib.metadata
import importlib.util
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from bench.common.documents import PREDICATES, reference_documents
from bench.common.results import machine, parser, previous, write_json
from bench.common.systems import LlamaCpp, Stage, Transformers, decide, label_questions, transformers_model, yes_no
from bench.common.workloads import GOOD, PRODUCTS, reviews, traces
from quail.reuse import Retain
from quail.session import Session

TRACE_PREDICATES = ["Did the agent run the tests?", "Did a tool report an error?"]
REVIEW_PREDICATES = ["Is the review positive?", "Does the review mention the price?"]
CATEGORIES = ["kitchen", "office", "outdoors", "audio"]
CATEGORY_QUESTION = "Which category is the product in?"
STORES = ["an online electronics shop", "a camping outfitter", "a kitchen supply store", "a department store"]
ABOUT, SELLS = "The review is about this product.", "This store would sell the product."

# (workload, model, rows, systems); W3's rows are its anchors, against 10 products
PLANS = {
    "full": [("W1", "smollm2-135m", 200, "quail,e,a,b,c,d"), ("W2", "smollm2-135m", 30, "quail,e,a,b,c,d"),
             ("W3", "smollm2-135m", 20, "quail,e,a,b,c,d"), ("W4", "smollm2-135m", 30, "quail,e,a,b,c,d"),
             ("W1", "qwen2.5-coder-0.5b", 24, "quail,e,a,c,d")],
    "bench": [("W1", "smollm2-135m", 12, "quail,e,a,b,c,d"), ("W2", "smollm2-135m", 8, "quail,e,a,b,c,d"),
              ("W3", "smollm2-135m", 4, "quail,e,a,b,c,d"), ("W4", "smollm2-135m", 6, "quail,e,a,b,c,d"),
              ("W1", "qwen2.5-coder-0.5b", 3, "quail,e,a,c,d")],
    "smoke": [("W1", "smollm2-135m", 3, "quail,e,a,b,c,d"), ("W2", "smollm2-135m", 3, "quail,e,a,b,c,d"),
              ("W3", "smollm2-135m", 2, "quail,e,a,b,c,d"), ("W4", "smollm2-135m", 8, "quail,e,a,b,c,d"),
              ("W1", "qwen2.5-coder-0.5b", 2, "quail,e,a,c,d")],
}
LABELS = {"quail": "Quail", "e": "(e) Quail, no reuse", "a": "(a) transformers, one at a time",
          "b": "(b) transformers, batches of 8", "c": "(c) transformers + prefix cache",
          "d": "(d) llama.cpp, prefix reuse"}


@dataclass
class Workload:
    """`quail(reuse)` -> (decisions, tokens computed); `stages()` yields the baselines' operators."""
    quail: Callable[[bool], tuple[dict, int]]
    stages: Callable[[], Iterator[Stage]]


def median_p(probs) -> float:
    """Halfway between the two middle P(yes)s, so that no row sits on the threshold, where the last
    digit of a sum would decide it."""
    v = sorted(probs)
    k = len(v) // 2
    return float((v[k - 1] + v[k]) / 2) if len(v) > 1 else float(v[0])


def filter_workload(s: Session, name: str, texts: list[str], predicates: list[str]) -> Workload:
    probe, _ = s.filter(texts, predicates[:1], 0.0)
    threshold = median_p(p[0] for p in probe.p_yes)

    def quail(reuse):
        r, stats = s.filter(texts, predicates, threshold, reuse=reuse)
        return {(name, i): ok for i, ok in enumerate(r.passed)}, stats.tokens_computed

    def stages():
        yield Stage(name, [s.layout.document(t) for t in texts],
                    [yes_no(s, s.layout.yes_no_question(p)) for p in predicates], "filter", threshold)
    return Workload(quail, stages)


def join_stage(s: Session, name, left, right, condition, threshold, rows) -> Stage:
    cond = s.layout.pair_question(condition)
    return Stage(name, [s.layout.document(t) for t in left], [yes_no(s, s.layout.partner(t) + cond) for t in right],
                 "join", threshold, rows)


def join_decisions(name, result, threshold, rows) -> dict:
    return {(name, rows[d], q): p >= threshold for d, ps in enumerate(result.p_yes) for q, p in enumerate(ps)}


def join_workload(s: Session, anchors: int) -> Workload:
    rng = random.Random(7)
    left = reviews(anchors, rng)
    right = [f"{p}: {rng.choice(GOOD)}, model {rng.randint(100, 999)}" for p in PRODUCTS[:10]]
    probe, _ = s.join(left, right, ABOUT)
    threshold = median_p(p for ps in probe.p_yes for p in ps)
    rows = list(range(anchors))

    def quail(reuse):
        r, stats = s.join(left, right, ABOUT, reuse=reuse)
        return join_decisions("join", r, threshold, rows), stats.tokens_computed

    def stages():
        yield join_stage(s, "join", left, right, ABOUT, threshold, rows)
    return Workload(quail, stages)


def pipeline_workload(s: Session, n: int) -> Workload:
    rng = random.Random(7)
    texts = reviews(n, rng)
    products = [f"{p}: {rng.choice(GOOD)}, model {rng.randint(100, 999)}" for p in PRODUCTS]
    probe, _ = s.filter(texts, REVIEW_PREDICATES[:1], 0.0)
    t_filter = median_p(p[0] for p in probe.p_yes)
    kept = [i for i, ok in enumerate(s.filter(texts, REVIEW_PREDICATES, t_filter)[0].passed) if ok]
    t_about = median_p(p for ps in s.join([texts[i] for i in kept], products, ABOUT)[0].p_yes for p in ps)
    t_sells = median_p(p for ps in s.join([texts[i] for i in kept], STORES, SELLS)[0].p_yes for p in ps)
    later = ("classify", "join_1", "join_2")

    def quail(reuse):
        pool, out, tokens = s.engine.pool, {}, 0

        def step(stats, name):
            nonlocal tokens
            tokens += stats.tokens_computed
            pool.consumed(name)
        f, stats = s.filter(texts, REVIEW_PREDICATES, t_filter, reuse=reuse, retain=Retain(frozenset(later)))
        step(stats, "filter")
        out |= {("filter", i): ok for i, ok in enumerate(f.passed)}
        rows = [i for i, ok in enumerate(f.passed) if ok]
        assert rows == kept, "the filter kept other rows than in the threshold run"
        kept_texts = [texts[i] for i in rows]
        c, stats = s.classify(kept_texts, CATEGORIES, CATEGORY_QUESTION, reuse=reuse,
                              retain=Retain(frozenset(later[1:])))
        step(stats, "classify")
        out |= {("classify", r): label for r, label in zip(rows, c.labels)}
        j, stats = s.join(kept_texts, products, ABOUT, reuse=reuse, retain=Retain(frozenset(later[2:])))
        step(stats, "join_1")
        out |= join_decisions("join_1", j, t_about, rows)
        j, stats = s.join(kept_texts, STORES, SELLS, reuse=reuse)
        step(stats, "join_2")
        out |= join_decisions("join_2", j, t_sells, rows)
        return out, tokens

    def stages():
        # The later operators take the rows Quail's filter kept, whatever the baseline's filter
        # decided, so that every system does the same work (a bf16 filter keeps other rows).
        yield Stage("filter", [s.layout.document(t) for t in texts],
                    [yes_no(s, s.layout.yes_no_question(p)) for p in REVIEW_PREDICATES], "filter", t_filter)
        docs = [s.layout.document(texts[i]) for i in kept]
        yield Stage("classify", docs, label_questions(s, CATEGORY_QUESTION, CATEGORIES), "classify", rows=kept)
        yield join_stage(s, "join_1", [texts[i] for i in kept], products, ABOUT, t_about, kept)
        yield join_stage(s, "join_2", [texts[i] for i in kept], STORES, SELLS, t_sells, kept)
    return Workload(quail, stages)


def workload(name: str, s: Session, rows: int) -> Workload:
    if name == "W1":
        return filter_workload(s, "filter", reference_documents(rows, s.loaded.tokenizer), PREDICATES)
    if name == "W2":
        return filter_workload(s, "filter", traces(1, rows, random.Random(7)), TRACE_PREDICATES)
    if name == "W3":
        return join_workload(s, rows)
    return pipeline_workload(s, rows)


def baseline(w: Workload, runner, ask_for) -> tuple[dict, int]:
    runner.computed = 0
    decisions = {key: d for stage in w.stages() for key, d in decide(stage, *ask_for(stage)).items()}
    return decisions, runner.computed


def systems(s: Session, w: Workload, model: str, hf: Transformers | None):
    """key -> a function that prepares a run and returns the run to time."""
    def quail(reuse):
        def run():
            out = w.quail(reuse)
            assert s.engine.free_pages == s.engine.settings.arena_pages  # nothing left behind
            return out
        return run

    def transformers(method):
        return lambda: baseline(w, hf, getattr(hf, method))

    def llama():
        cpp = LlamaCpp(model)

        def run():
            try:
                return baseline(w, cpp, cpp.prefix_reuse)
            finally:
                cpp.close()
        return run

    return {"quail": lambda: quail(True), "e": lambda: quail(False), "a": lambda: transformers("one_at_a_time"),
            "b": lambda: transformers("batches"), "c": lambda: transformers("prefix_cache"), "d": llama}


def agreement(a: dict, b: dict) -> float:
    keys = a.keys() | b.keys()
    return sum(a.get(k) == b.get(k) for k in keys) / len(keys)


def measure(name: str, s: Session, model: str, rows: int, keys: list[str], repeats: int, hf) -> dict:
    w = workload(name, s, rows)
    prepare = systems(s, w, model, hf)
    times = {k: [] for k in keys}
    outputs = {}
    for _ in range(repeats):
        for k in keys:
            run = prepare[k]()
            start = time.perf_counter()
            with torch.inference_mode():
                out = run()
            times[k].append(time.perf_counter() - start)
            print(f"  {LABELS[k]}: {times[k][-1]:.1f} s", flush=True)
            assert outputs.setdefault(k, out)[1] == out[1], f"{k}: tokens computed changed between repeats"
    reference = outputs["quail"][0]
    result = []
    for k in keys:
        seconds = statistics.median(times[k])
        decisions, computed = outputs[k]
        result.append({"system": LABELS[k], "seconds": seconds, "times": times[k], "tokens_computed": computed,
                       "tokens_per_second": computed / seconds, "agree": agreement(decisions, reference),
                       "decisions": len(decisions)})
    return {"workload": name, "model": model, "rows": rows, "repeats": repeats, "dtype": str(s.engine.model.dtype),
            "systems": result}


def table(run: dict) -> str:
    rows = run["rows"] if run["workload"] != "W3" else f"{run['rows']} x 10"
    lines = [f"**{run['workload']}**, {rows} rows, {run['model']} (Quail {run['dtype']}, transformers bf16), "
             f"median of {run['repeats']}", "",
             "| system | seconds | tokens computed | tokens/s | x Quail's time | decisions agree with Quail |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    quail = run["systems"][0]["seconds"]
    for r in run["systems"]:
        lines.append(f"| {r['system']} | {r['seconds']:.1f} | {r['tokens_computed']:,} | "
                     f"{r['tokens_per_second']:,.0f} | {r['seconds'] / quail:.2f} | {r['agree']:.3f} |")
    return "\n".join(lines) + "\n"


def versions() -> dict:
    return {m: importlib.metadata.version(m) for m in ("transformers", "llama_cpp_python")
            if importlib.util.find_spec(m.removesuffix("_python"))}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--size", default="bench", choices=PLANS)
    ap.add_argument("--only", default="", help="comma-separated workloads to run again, e.g. W1,W4; the others "
                    "keep their results from the output file")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    plan = [p for p in PLANS[args.size] if not args.only or p[0] in args.only.split(",")]
    stem = f"suite-{args.size}"
    runs = {(r["workload"], r["model"]): r for r in previous(args, stem).get("runs", [])}
    started, sessions = time.perf_counter(), {}
    for name, model, rows, keys in plan:
        if model not in sessions:
            sessions = {model: (Session.open(model), Transformers(transformers_model(model, torch.bfloat16)))}
        s, hf = sessions[model]
        print(f"{name}, {model}, {rows} rows:", flush=True)
        keys = [k for k in keys.split(",") if k != "d" or _has_llama_cpp()]
        runs[name, model] = measure(name, s, model, rows, keys, args.repeats, hf) | {
            "machine": machine() | versions(), "dtype": str(s.engine.model.dtype).removeprefix("torch."),
            "dtype_why": s.loaded.dtype_why}
    ordered = [runs[w, m] for w, m, _, _ in PLANS[args.size] if (w, m) in runs]
    md = "\n".join(table(r) for r in ordered)
    print(f"\n{md}\nsuite wall time {time.perf_counter() - started:.0f} s")
    write_json(args, {"size": args.size, "runs": ordered}, stem, md)


def _has_llama_cpp() -> bool:
    if importlib.util.find_spec("llama_cpp") is None:
        print("  (d) skipped: llama-cpp-python is not installed (bench/requirements-llama.txt; `make bench` has it)")
        return False
    return True
