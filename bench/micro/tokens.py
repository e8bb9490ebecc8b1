"""Tokens computed by four ways of running the same workloads: naive, an LRU block-hash cache
(vLLM's automatic prefix caching policy) of the same arena size, Quail, and the physical lower
bound (unique tokens of all prompts). At a large arena and at a tight one.

    python -m bench micro tokens [--model smollm2-135m] [--only W4]

W1: a three-predicate filter over reviews-like documents. W2: incremental agent traces (each row
extends the previous turn) under a two-predicate filter. W3: a join. W4: the four-operator pipeline
(filter with two predicates -> classify -> join -> a second join with the same anchor).
Thresholds sit at the median P(yes) of the first predicate over the input, so about half of the
rows pass: this measures tokens, not accuracy (`python -m bench quality accuracy` does that).
"""

import contextlib
import random
import time
from collections import OrderedDict

import numpy as np
import torch

from bench.common.results import parser, write_json
from bench.common.workloads import GOOD, PRODUCTS, reviews, traces
from quail.executor import scheduler
from quail.executor.engine import PhysicalSettings
from quail.model.loader import load_model
from quail.reuse import Retain, Reuse
from quail.session import Session

# The baselines, computed from the exact prompts a no-reuse run evaluates, in its order.

def lru_block_cache(prompts: list[list[int]], blocks: int, block_size: int = 16) -> int:
    """vLLM's automatic prefix caching policy: full 16-token blocks identified by chained hashes,
    looked up as the longest cached chain of a prompt's blocks, least recently used evicted first,
    no planning. Simulated one prompt at a time with the whole arena as the cache, which is generous
    to it (a real server also needs room for running requests)."""
    cache: OrderedDict[int, None] = OrderedDict()
    computed = 0
    for prompt in prompts:
        hashes, h = [], 0
        for lo in range(0, len(prompt) - block_size + 1, block_size):
            h = hash((h, tuple(prompt[lo : lo + block_size])))
            hashes.append(h)
        hit = 0
        while hit < len(hashes) and hashes[hit] in cache:
            hit += 1
        computed += max(len(prompt) - hit * block_size, 1)  # the last token is always computed
        for h in hashes:
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > blocks:
            cache.popitem(last=False)
    return computed


def trie_nodes(prompts: list[list[int]]) -> int:
    """The physical lower bound: the unique tokens of all prompts (the nodes of their trie)."""
    root: dict = {}
    nodes = 0
    for prompt in prompts:
        node = root
        for t in prompt:
            nxt = node.get(t)
            if nxt is None:
                nxt = node[t] = {}
                nodes += 1
            node = nxt
    return nodes


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


def markdown(rows: list[dict]) -> str:
    lines = ["| workload | arena (pages) | naive | LRU block cache | Quail | lower bound | Quail / bound |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['arena']} ({r['arena_pages']}) | {r['naive']:,} | {r['lru']:,} | "
                     f"{r['quail']:,} | {r['bound']:,} | {r['quail'] / r['bound']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--only", default="", help="the workloads whose name starts with this, e.g. W4")
    args = ap.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    loaded = load_model(args.model, "bfloat16")
    arenas = {"large": PhysicalSettings(arena_pages=8192, max_batch_tokens=1024),
              "tight": PhysicalSettings(arena_pages=128, max_batch_tokens=512)}
    sessions = {name: Session(loaded, plan) for name, plan in arenas.items()}
    rows = []
    for name, run in workloads(sessions["large"]).items():
        if not name.startswith(args.only):
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
            assert s.engine.free_pages == s.engine.settings.arena_pages  # nothing left behind
            lru = lru_block_cache(prompts, arenas[arena].arena_pages)
            rows.append({"workload": name, "arena": arena, "arena_pages": arenas[arena].arena_pages, "naive": naive,
                         "lru": lru, "quail": quail, "bound": bound, "seconds": round(seconds, 1)})
            print(f"{name} [{arena}]: naive {naive:,} lru {lru:,} quail {quail:,} bound {bound:,} "
                  f"({quail / bound:.3f}x bound) in {seconds:.0f} s", flush=True)
    md = markdown(rows)
    print("\n" + md)
    write_json(args, {"model": args.model, "dtype": "bfloat16", "rows": rows}, markdown=md)
