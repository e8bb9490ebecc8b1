"""W5: a filter, then an extract of 3 fields from the rows it kept, over W1's documents (Python
reference topics of 250-300 tokens). Every system asks the same token ids (Quail's prompt layout)
and writes under the same grammar (llguidance, greedy), so their outputs can be compared.

Systems: Quail (the extract reuses the KV the filter kept; rows write in shared forward passes);
Quail with no reuse; transformers with `generate`, greedy, one row at a time and left-padded
batches of 8 (the filter a forward pass per row, the extract each document again).

    python -m bench e2e extract [--model smollm2-135m] [--rows 32] [--dtype auto]
"""

import json
import time
from collections.abc import Callable

import llguidance
import llguidance.torch as lt
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from bench.common.results import parser, write_json
from bench.common.systems import left_padded, transformers_model
from quail.kinds.extract import DEFAULT_INSTRUCTION, json_schema, parse_fields
from quail.kinds.extract import render as render_extract
from quail.kinds.filter import render as render_filter
from quail.ops import grammar
from quail.ops.grammar import json_grammar
from quail.session import Session

PREDICATE = "Does the text describe part of the Python language or its library?"
FIELDS = parse_fields({"feature": {"type": "str", "description": "the Python feature it describes"},
                       "keywords": {"type": "int", "description": "how many Python keywords it names"},
                       "has_example": {"type": "bool", "description": "whether it shows an example"}})
MOST = 48


class Grammar(LogitsProcessor):
    """The extract's grammar for transformers' generate: each row's next token masked as Quail's is."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, schema: str, rows: int, vocab: int, stop: int):
        grammar = json_grammar(schema)
        self.matchers = [llguidance.LLMatcher(tokenizer, grammar) for _ in range(rows)]
        self.mask, self.vocab, self.stop, self.width = lt.allocate_token_bitmask(rows, vocab), vocab, stop, None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.width is None:
            self.width = input_ids.shape[1]
        else:
            for m, ids in zip(self.matchers, input_ids):
                if not m.is_stopped():
                    m.consume_token(int(ids[-1]))
        for i, m in enumerate(self.matchers):
            lt.fill_next_token_bitmask(m, self.mask, i)
        lt.apply_token_bitmask_inplace(scores, self.mask.to(scores.device))
        return scores


def written(ids: list[int], stop: int) -> tuple[int, ...]:
    return tuple(ids[: ids.index(stop)] if stop in ids else ids)


def transformers_run(hf: torch.nn.Module, s: Session, docs: list[list[int]], predicate: list[int], question: list[int],
                     batch: int, threshold: float) -> tuple[list[tuple[int, ...]], int, float]:
    """The filter (one forward per row, the last position's yes/no) then generate for the kept rows."""
    yes, no = s.layout.yes_no.yes, s.layout.yes_no.no
    vocab, stop, fed = s.loaded.config.vocab_size, s.loaded.tokenizer.stop_ids[0], 0
    tokenizer = llguidance.LLTokenizer(s.loaded.tokenizer.json(), n_vocab=vocab, eos_token=stop)
    schema = json.dumps(json_schema(FIELDS))
    start, kept = time.perf_counter(), []
    with torch.inference_mode():
        for lo in range(0, len(docs), batch):
            rows = [d + predicate for d in docs[lo: lo + batch]]
            ids, mask = (x.to(hf.device) for x in left_padded(rows))
            logp = torch.log_softmax(hf(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1].float(), -1)
            fed += sum(map(len, rows))
            for k, row in enumerate(logp):
                p_yes = row[yes].exp().sum() / (row[yes].exp().sum() + row[no].exp().sum())
                if p_yes >= threshold:
                    kept.append(lo + k)
        outs = []
        for lo in range(0, len(kept), batch):
            rows = [docs[i] + question for i in kept[lo: lo + batch]]
            ids, mask = (x.to(hf.device) for x in left_padded(rows))
            g = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=MOST,
                            eos_token_id=stop, pad_token_id=stop,
                            logits_processor=LogitsProcessorList([Grammar(tokenizer, schema, len(rows), vocab, stop)]))
            for row in g[:, ids.shape[1]:].tolist():
                outs.append(written(row, stop))
                fed += len(outs[-1])
            fed += sum(map(len, rows))
    return outs, fed, time.perf_counter() - start


def quail_run(s: Session, texts: list[str], threshold: float, reuse: bool = True) -> dict:
    """The filter, then the extract of the rows it kept; the arena's retained KV dropped before and after."""
    s.engine.pool.clear()
    start = time.perf_counter()
    f, fs = s.filter(texts, [PREDICATE], threshold, reuse=reuse, retain=reuse)
    kept = [t for t, p in zip(texts, f.passed) if p]
    extract_start = time.perf_counter()
    e, es = s.extract(kept, FIELDS, max_new_tokens=MOST, reuse=reuse)
    s.engine.pool.clear()
    return {"seconds": time.perf_counter() - start, "extract_seconds": time.perf_counter() - extract_start,
            "rows": len(kept), "computed": fs.tokens_computed + es.tokens_computed, "generated": es.tokens_generated,
            "outputs": [w.tokens for w in e.written.written], "retention": es.tokens_reused["retention"]}


def timed(spent: list[float]) -> None:
    """The grammar's work in Quail's rows (each step's mask, and taking the token) adds to spent[0]."""
    for name in ("choose", "accept"):
        method = getattr(grammar.JsonMatcher, name)

        def wrapper(self: grammar.JsonMatcher, x: object, method: Callable = method) -> object:
            t = time.perf_counter()
            try:
                return method(self, x)
            finally:
                spent[0] += time.perf_counter() - t

        setattr(grammar.JsonMatcher, name, wrapper)


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=32, help="documents the filter reads")
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args(argv)
    from bench.common.documents import reference_documents  # pydoc_data, which the GPU machine may lack

    model, n = args.model, args.rows
    s = Session.open(model, args.dtype)
    texts = reference_documents(n, s.loaded.tokenizer)
    docs = s.layout.documents(texts)
    predicate, question = render_filter(s.layout, [PREDICATE])[0], render_extract(s.layout, DEFAULT_INSTRUCTION, FIELDS)
    results, spent = {}, [0.0]
    timed(spent)
    for name, reuse in (("quail", True), ("quail, no reuse", False)):
        spent[0] = 0.0
        r = quail_run(s, texts, 0.5, reuse)
        results[name] = r | {"grammar": spent[0] / r["extract_seconds"]}
    threshold = 0.5
    hf = transformers_model(model, s.loaded.model.dtype)
    for name, batch in (("transformers batched (8)", 8), ("transformers, one row at a time", 1)):
        outs, fed, seconds = transformers_run(hf, s, docs, predicate, question, batch, threshold)
        results[name] = {"seconds": seconds, "rows": len(outs), "computed": fed, "generated": sum(map(len, outs)),
                         "outputs": outs}
    quail = results["quail"]["outputs"]
    print(f"W5 on {model} ({s.loaded.model.dtype}), {n} documents, {results['quail']['rows']} kept, "
          f"max_new_tokens {MOST}")
    print("| system | seconds | tokens fed | written | outputs equal to Quail's |\n|---|---:|---:|---:|---:|")
    for name, r in results.items():
        same = sum(a == b for a, b in zip(r["outputs"], quail))
        print(f"| {name} | {r['seconds']:.1f} | {r['computed']:,} | {r['generated']:,} | {same}/{len(quail)} |")
    print(f"Quail's extract reused {results['quail']['retention']:,} document tokens the filter kept; the grammar "
          f"took {results['quail']['grammar']:.1%} of its extract's time")
    systems = [{"system": name} | {k: v for k, v in r.items() if k != "outputs"}
               | {"outputs_equal_to_quail": sum(a == b for a, b in zip(r["outputs"], quail))}
               for name, r in results.items()]
    write_json(args, {"model": model, "dtype": str(s.loaded.model.dtype).removeprefix("torch."), "documents": n,
                      "kept": results["quail"]["rows"], "max_new_tokens": MOST, "systems": systems})


