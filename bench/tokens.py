"""Tokens computed by four ways of running the same workloads: naive, an LRU block-hash cache
(vLLM's automatic prefix caching policy) of the same arena size, Quail, and the physical lower
bound (unique tokens of all prompts). At a large arena and at a tight one.

    .venv/bin/python bench/tokens.py [MODEL] [WORKLOAD, e.g. W4]

W1: a three-predicate filter over reviews-like documents. W2: incremental agent traces (each row
extends the previous turn) under a two-predicate filter. W3: a join. W4: the four-operator pipeline
(filter with two predicates -> classify -> join -> a second join with the same anchor).
Thresholds sit at the median P(yes) of the first predicate over the input, so about half of the
rows pass: this measures tokens, not accuracy (see bench/accuracy.py for that).
"""

import contextlib
import random
import sys
import time

import numpy as np
import torch

from baselines import lru_block_cache, trie_nodes
from quail.executor.engine import PhysicalPlan
from quail.reuse import Reuse
from quail.reuse import Retain
from quail.executor import scheduler
from quail.model.loader import load_model
from quail.session import Session

PRODUCTS = ["kettle", "blender", "desk lamp", "backpack", "headphones", "rice cooker", "office chair",
            "e-reader", "tent", "coffee grinder", "monitor", "running shoes"]
GOOD = ["works exactly as described", "feels solid and well made", "was easy to set up", "is quiet",
        "arrived a day early", "looks great on my desk", "has lasted two years of daily use"]
BAD = ["stopped working after a week", "smells of plastic", "is much louder than advertised",
       "arrived with a cracked lid", "has a wobbly base", "drains the battery overnight"]
EXTRA = ["The price was fair for what you get.", "Customer service answered within a day.",
         "I bought it as a gift for my sister.", "The instructions were confusing.",
         "Packaging was mostly cardboard, which I appreciate.", "I would buy it again.",
         "It replaced an older model that broke.", "Shipping took almost three weeks."]
TOOLS = ["search_docs", "run_tests", "read_file", "edit_file", "list_dir"]


def reviews(n: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(n):
        product = rng.choice(PRODUCTS)
        good = rng.random() < 0.5
        parts = [f"I ordered the {product} last month."]
        parts += [f"It {rng.choice(GOOD if good else BAD)}." for _ in range(rng.randint(1, 3))]
        parts += rng.sample(EXTRA, rng.randint(2, 5))
        parts.append(f"Overall {'recommended' if good else 'not recommended'}, {rng.randint(1, 5)} stars.")
        out.append(" ".join(parts))
    return out


def traces(n_traces: int, turns: int, rng: random.Random) -> list[str]:
    rows = []
    for t in range(n_traces):
        text = f"Task {t}: fix the failing test in module {rng.choice(PRODUCTS).replace(' ', '_')}."
        for k in range(turns):
            tool = rng.choice(TOOLS)
            text += (f"\n\nTurn {k + 1}. Thought: I should use {tool} to check step {k + 1}."
                     f"\nAction: {tool}(path='src/part_{rng.randint(1, 99)}.py')"
                     f"\nObservation: {rng.choice(EXTRA)} {rng.choice(GOOD + BAD)}; exit code {rng.randint(0, 2)}.")
            rows.append(text)
    return rows


@contextlib.contextmanager
def recorded_prompts():
    """The full token sequence of every prompt a run evaluates, in order."""
    prompts, settle = [], scheduler.settle

    def record(req, *args):
        if req.ext.prompt:
            prompts.append(list(req.ext.seq.tokens))
        return settle(req, *args)

    scheduler.settle = record
    try:
        yield prompts
    finally:
        scheduler.settle = settle


def median_threshold(s: Session, texts, predicate) -> float:
    f, _ = s.filter(texts, [predicate], threshold=0.0)
    return float(np.median([p[0] for p in f.p_yes]))


def workloads(s: Session):
    rng = random.Random(7)
    w1 = reviews(160, rng)
    w2 = traces(10, 10, rng)
    products = [f"{p}: {rng.choice(GOOD)}, model {rng.randint(100, 999)}" for p in PRODUCTS]
    stores = ["an online electronics shop", "a camping outfitter", "a kitchen supply store", "a department store"]
    p1 = ["Is the review positive?", "Does the review mention the price?", "Would the reviewer buy it again?"]
    p2 = ["Did the agent run the tests?", "Did a tool report an error?"]
    t1 = median_threshold(s, w1, p1[0])
    t2 = median_threshold(s, w2, p2[0])

    def w1_run(s, reuse):
        return [s.filter(w1, p1, t1, reuse=reuse)[1]]

    def w2_run(s, reuse):
        return [s.filter(w2, p2, t2, reuse=reuse)[1]]

    def w3_run(s, reuse):
        return [s.join(w1[:40], products, "The review is about this product.", reuse=reuse)[1]]

    def w4_run(s, reuse):
        pool, stats = s.engine.pool, []
        f, st = s.filter(w1, p1[:2], t1, reuse=reuse, retain=Retain(frozenset({"classify", "join_1", "join_2"})))
        pool.consumed("filter")
        stats.append(st)
        kept = [t for t, ok in zip(w1, f.passed) if ok]
        _, st = s.classify(kept, ["kitchen", "office", "outdoors", "audio"], "Which category is the product in?",
                           reuse=reuse, retain=Retain(frozenset({"join_1", "join_2"})))
        pool.consumed("classify")
        stats.append(st)
        _, st = s.join(kept, products, "The review is about this product.", reuse=reuse,
                       retain=Retain(frozenset({"join_2"})))
        pool.consumed("join_1")
        stats.append(st)
        _, st = s.join(kept, stores, "This store would sell the product.", reuse=reuse)
        pool.consumed("join_2")
        stats.append(st)
        return stats

    return {"W1 filter, 3 predicates": w1_run, "W2 agent traces": w2_run, "W3 join": w3_run, "W4 pipeline": w4_run}


def main(model="smollm2-135m", only=""):
    torch.set_num_threads(torch.get_num_threads())
    loaded = load_model(model, "bfloat16")
    arenas = {"large": PhysicalPlan(arena_pages=8192, max_batch_tokens=1024),
              "tight": PhysicalPlan(arena_pages=128, max_batch_tokens=512)}
    sessions = {name: Session(loaded, plan) for name, plan in arenas.items()}
    rows = []
    for name, run in workloads(sessions["large"]).items():
        if not name.startswith(only):
            continue
        with recorded_prompts() as prompts:
            naive = sum(st.tokens_computed for st in run(sessions["large"], Reuse.none()))
        assert naive == sum(map(len, prompts))
        bound = trie_nodes(prompts)
        for arena, s in sessions.items():
            start = time.perf_counter()
            stats = run(s, Reuse())
            seconds = time.perf_counter() - start
            quail = sum(st.tokens_computed for st in stats)
            assert s.engine.free_pages == s.engine.plan.arena_pages  # nothing left behind
            lru = lru_block_cache(prompts, arenas[arena].arena_pages)
            rows.append((name, arena, arenas[arena].arena_pages, naive, lru, quail, bound, seconds))
            print(f"{name} [{arena}]: naive {naive:,} lru {lru:,} quail {quail:,} bound {bound:,} "
                  f"({quail / bound:.3f}x bound) in {seconds:.0f} s", flush=True)
    print("\n| workload | arena (pages) | naive | LRU block cache | Quail | lower bound | Quail / bound |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, arena, pages, naive, lru, quail, bound, _ in rows:
        print(f"| {name} | {arena} ({pages}) | {naive:,} | {lru:,} | {quail:,} | {bound:,} | {quail / bound:.3f} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
