"""Filters side by side (chain mode: a document is asked the next predicate only while it passes),
run by Quail and by what a user would otherwise write, with the same model, the same prompt token
ids and the same decision rule. W1: three predicates over real documents (standard-library
docstrings, up to 300 tokens). W2: two predicates over 30 rows of one agent trace, each row the
previous one plus a turn (bench/tokens.py's traces()).

    .venv/bin/python bench/suite.py [--workload W1|W2] [--model M] [--docs N] [--repeats R]
                                    [--systems a,b,c,d,e,quail]

(a) transformers, one prompt at a time, logits_to_keep=1; (b) transformers, left-padded batches
of 8, one predicate level at a time; (c) transformers with a hand-rolled prefix cache per document
(the document once, a copy of its DynamicCache per question); all three in bf16 (what the issue's
user writes) unless --baseline-dtype float32; (d) llama-cpp-python on the same
GGUF file with its automatic prefix reuse, prompts in document order (only where it is
installed: bench/requirements-llama.txt); (e) Quail with every reuse switched off; and Quail.
Writes bench/results/WORKLOAD-MODEL.json and prints a table.
"""

import argparse
import copy
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from prefill import stdlib_documents, transformers_model
from tokens import GOOD, PRODUCTS, reviews, traces
from quail.model.registry import embedded_path
from quail.ops.answers import p_yes
from quail.session import Session

FILTERS = {
    "W1": (lambda n, tokenizer: stdlib_documents(n, tokenizer),
           ["Does this text describe a function that works with files or directories?",
            "Does it mention an exception or an error?", "Does it describe a return value?"]),
    "W2": (lambda n, tokenizer: traces(1, n, random.Random(7)),
           ["Did the agent run the tests?", "Did a tool report an error?"]),
}
CONDITION = "The review is about this product."  # W3: 20 reviews x 10 products (bench/tokens.py's)


class Prompts:
    """The token ids Quail's prompt layout gives each document and question. A filter's questions
    are its predicates, asked in chain mode; a join's are its partners (each with the condition),
    all asked of every anchor."""

    def __init__(self, s: Session, docs: list[str], questions: list[list[int]], chained: bool):
        self.docs = [s.layout.document(t) for t in docs]
        self.questions = questions
        self.chained = chained
        self.ids = s.layout.answers.ids
        self.n_yes = len(s.layout.answers.yes)

    def p_yes(self, logits: torch.Tensor) -> float:
        lp = torch.log_softmax(logits.float(), -1)[self.ids].numpy()
        return p_yes(lp, self.n_yes)


def chain(prompts: Prompts, threshold: float, ask) -> tuple[list[bool], int]:
    """ask(pairs) gives P(yes) for (document, question) pairs. A filter asks by level and returns
    a decision per document; a join asks every pair and returns one per pair (anchor-major).
    Also returns the tokens the prompts hold."""
    if not prompts.chained:
        pairs = [(d, q) for d in range(len(prompts.docs)) for q in range(len(prompts.questions))]
        tokens = sum(len(prompts.docs[d]) + len(prompts.questions[q]) for d, q in pairs)
        return [p >= threshold for p in ask(pairs)], tokens
    alive = list(range(len(prompts.docs)))
    tokens = 0
    for q in range(len(prompts.questions)):
        probs = ask([(d, q) for d in alive])
        tokens += sum(len(prompts.docs[d]) + len(prompts.questions[q]) for d in alive)
        alive = [d for d, p in zip(alive, probs) if p >= threshold]
    passed = set(alive)
    return [d in passed for d in range(len(prompts.docs))], tokens


def one_at_a_time(hf, prompts, threshold):
    def ask(pairs):
        out = []
        with torch.inference_mode():
            for d, q in pairs:
                ids = torch.tensor([prompts.docs[d] + prompts.questions[q]])
                out.append(prompts.p_yes(hf(input_ids=ids, logits_to_keep=1).logits[0, -1]))
        return out
    return chain(prompts, threshold, ask)


def padded_batches(hf, prompts, threshold, size=8):
    def ask(pairs):
        out = []
        with torch.inference_mode():
            for lo in range(0, len(pairs), size):
                rows = [prompts.docs[d] + prompts.questions[q] for d, q in pairs[lo:lo + size]]
                width = max(map(len, rows))
                ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
                mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
                logits = hf(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1]
                out += [prompts.p_yes(x) for x in logits]
        return out
    return chain(prompts, threshold, ask)


def prefix_cache(hf, prompts, threshold):
    """Per document: its KV once, then a copy of that cache for each question it is asked."""
    from transformers import DynamicCache

    decisions, tokens = [], 0
    with torch.inference_mode():
        for doc in prompts.docs:
            cache = DynamicCache()
            hf(input_ids=torch.tensor([doc]), past_key_values=cache, logits_to_keep=1)
            tokens += len(doc)
            answers = []
            for question in prompts.questions:
                qcache = copy.deepcopy(cache)
                logits = hf(input_ids=torch.tensor([question]), past_key_values=qcache, logits_to_keep=1).logits
                tokens += len(question)
                answers.append(prompts.p_yes(logits[0, -1]) >= threshold)
                if prompts.chained and not answers[-1]:
                    break
            decisions += [all(answers)] if prompts.chained else answers
    return decisions, tokens


def llama_cpp(name, prompts, threshold):
    """llama.cpp keeps the longest common prefix with the previous prompt's tokens."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(embedded_path(name)), n_ctx=2048, n_threads=torch.get_num_threads(), verbose=False)
    computed = [0]

    def ask(pairs):
        out = []
        for d, q in sorted(pairs):  # document by document, so its cache hits
            ids = prompts.docs[d] + prompts.questions[q]
            keep = next((i for i, (a, b) in enumerate(zip(llm.input_ids[:llm.n_tokens], ids)) if a != b),
                        min(llm.n_tokens, len(ids)))
            keep = min(keep, len(ids) - 1)
            llm.n_tokens = keep
            llm.eval(ids[keep:])
            computed[0] += len(ids) - keep
            # without logits_all, 0.3.36 keeps only the last token's logits, in the context
            last = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
            out.append(prompts.p_yes(torch.from_numpy(last.copy())))
        return out
    decisions, _ = chain(prompts, threshold, ask)
    llm.close()
    return decisions, computed[0]


def workload(name: str, s: Session, rows: int | None):
    """The prompts and a Quail run (reuse, threshold) -> (decisions, tokens computed, P(yes)s)."""
    if name == "W3":
        rng = random.Random(7)
        left = reviews(rows or 20, rng)
        right = [f"{p}: {rng.choice(GOOD)}, model {rng.randint(100, 999)}" for p in PRODUCTS[:10]]
        cond = s.layout.pair_question(CONDITION)
        prompts = Prompts(s, left, [s.layout.partner(t) + cond for t in right], chained=False)

        def quail(reuse, threshold):
            r, stats = s.join(left, right, CONDITION, reuse=reuse)
            probs = [p for row in r.p_yes for p in row]
            return [p >= threshold for p in probs], stats.tokens_computed, probs
        return prompts, quail
    make, predicates = FILTERS[name]
    texts = make(rows or {"W1": 200, "W2": 30}[name], s.loaded.tokenizer)
    prompts = Prompts(s, texts, [s.layout.yes_no_question(p) for p in predicates], chained=True)

    def quail(reuse, threshold):
        r, stats = s.filter(texts, predicates, threshold, reuse=reuse)
        return r.passed, stats.tokens_computed, [p[0] for p in r.p_yes]
    return prompts, quail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="W1", choices=[*FILTERS, "W3"])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--docs", type=int, help="rows (W1: 200, W2: 30, W3: 20 anchors)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default="quail,e,a,b,c,d")
    ap.add_argument("--baseline-dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="transformers' dtype: bf16 is what the issue's user writes; fp32 matches Quail's here")
    args = ap.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    s = Session.open(args.model)
    dtype = s.engine.model.dtype
    prompts, quail = workload(args.workload, s, args.docs)
    # a filter: about half pass the first predicate; a join: about half the pairs match
    threshold = float(np.median(quail(True, 0.0)[2]))
    hf = None
    systems = {
        "quail": ("Quail", lambda: quail(True, threshold)[:2]),
        "e": ("(e) Quail, no reuse", lambda: quail(False, threshold)[:2]),
        "a": ("(a) transformers, one at a time", lambda: one_at_a_time(hf, prompts, threshold)),
        "b": ("(b) transformers, batches of 8", lambda: padded_batches(hf, prompts, threshold)),
        "c": ("(c) transformers + prefix cache", lambda: prefix_cache(hf, prompts, threshold)),
        "d": ("(d) llama.cpp, prefix reuse", lambda: llama_cpp(args.model, prompts, threshold)),
    }
    rows, reference = [], None
    for key in args.systems.split(","):
        label, fn = systems[key]
        if key in "abc" and hf is None:
            hf = transformers_model(args.model, getattr(torch, args.baseline_dtype))
        try:
            times, out = [], None
            for _ in range(args.repeats):
                start = time.perf_counter()
                out = fn()
                times.append(time.perf_counter() - start)
        except ImportError as e:
            print(f"{label}: skipped ({e})", flush=True)
            continue
        decisions, computed = out
        reference = reference or decisions
        seconds = statistics.median(times)
        rows.append({"system": label, "seconds": seconds, "tokens_computed": computed,
                     "tokens_per_second": computed / seconds, "passed": sum(decisions),
                     "agree": float(np.mean([a == b for a, b in zip(decisions, reference)]))})
        print(json.dumps(rows[-1]), flush=True)
    quail = next((r["seconds"] for r in rows if r["system"] == "Quail"), None)
    out = Path(__file__).parent / "results" / f"{args.workload.lower()}-{args.model}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"workload": args.workload, "model": args.model, "dtype": str(dtype), "baseline_dtype": args.baseline_dtype,
                               "docs": len(prompts.docs), "repeats": args.repeats,
                               "threshold": threshold, "rows": rows}, indent=1))
    print(f"\n{args.workload}, {len(prompts.docs)} rows x {len(prompts.questions)} questions, {args.model} (Quail {dtype}, transformers "
          f"{args.baseline_dtype}), median of {args.repeats}")
    print("| system | seconds | tokens computed | tokens/s | x Quail's time | decisions agree with Quail |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        ratio = f"{r['seconds'] / quail:.2f}" if quail else ""
        print(f"| {r['system']} | {r['seconds']:.1f} | {r['tokens_computed']:,} | {r['tokens_per_second']:,.0f} | "
              f"{ratio} | {r['agree']:.3f} |")


if __name__ == "__main__":
    main()
