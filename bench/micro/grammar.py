"""The grammar libraries an extract could use, measured on a model's vocabulary: compile time per
schema, and the time to compute one step's mask (mean, p99) while writing a 5-field object.
llguidance is what Quail uses; xgrammar and outlines-core are measured where installed.

    python -m bench micro grammar [--model qwen2.5-coder-1.5b]
"""

import json
import time

import numpy as np

from bench.common.results import parser, write_json
from quail.model.loader import load_model
from quail.ops.grammar import json_grammar

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["company", "amount", "date", "sentiment", "tags"], "properties": {
              "company": {"anyOf": [{"type": "string"}, {"type": "null"}]},
              "amount": {"anyOf": [{"type": "number"}, {"type": "null"}]},
              "date": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
              "sentiment": {"anyOf": [{"type": "string", "enum": ["positive", "negative", "neutral"]},
                                      {"type": "null"}]},
              "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}}}
ANSWER = {"company": "Acme Corp", "amount": 1234.5, "date": "2024-03-01", "sentiment": "positive",
          "tags": ["q1", "sales"]}


RESULTS: list[dict] = []


def report(name: str, setup: float, compiles: list[float], steps: list[float]) -> None:
    ms = np.array(steps) * 1e3
    RESULTS.append({"library": name, "tokenizer_setup_s": setup, "compile_first_ms": compiles[0] * 1e3,
                    "compile_again_ms": compiles[-1] * 1e3, "mask_mean_ms": float(ms.mean()),
                    "mask_p99_ms": float(np.percentile(ms, 99))})
    print(f"{name:14s} tokenizer {setup:6.2f} s; compile first {compiles[0] * 1e3:7.1f} ms, again "
          f"{compiles[-1] * 1e3:6.1f} ms; mask per step mean {ms.mean():.3f} ms, p99 {np.percentile(ms, 99):.3f} ms")


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    args = ap.parse_args(argv)
    name = args.model
    RESULTS.clear()
    loaded = load_model(name, "float32")
    tok, vocab = loaded.tokenizer, loaded.config.vocab_size
    stop = tok.stop_ids[0]
    ids = tok.encode(json.dumps(ANSWER, separators=(",", ":")))
    print(f"{name}: vocabulary {vocab:,}; the object is {len(ids)} tokens")

    import llguidance
    import llguidance.numpy as lt

    t = time.perf_counter()
    llt = llguidance.LLTokenizer(tok.json(), n_vocab=vocab, eos_token=stop)
    setup = time.perf_counter() - t
    compiles, steps = [], []
    for _ in range(3):
        t = time.perf_counter()
        grammar = json_grammar(json.dumps(SCHEMA))
        m = llguidance.LLMatcher(llt, grammar)
        compiles.append(time.perf_counter() - t)
        mask, steps = lt.allocate_token_bitmask(1, vocab), []
        for token in ids:
            t = time.perf_counter()
            lt.fill_next_token_bitmask(m, mask, 0)
            steps.append(time.perf_counter() - t)
            assert m.consume_token(token), m.get_error()
        assert m.is_stopped()
    report("llguidance", setup, compiles, steps)

    try:
        import xgrammar as xgr
    except ImportError:
        print("xgrammar       not installed")
    else:
        t = time.perf_counter()
        info = xgr.TokenizerInfo([tok._tk.id_to_token(i) or "" for i in range(vocab)],
                                 vocab_type=xgr.VocabType.BYTE_LEVEL, vocab_size=vocab, stop_token_ids=[stop])
        compiler = xgr.GrammarCompiler(info, max_threads=2)
        setup = time.perf_counter() - t
        compiles = []
        for _ in range(3):
            t = time.perf_counter()
            compiled = compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=False, separators=(",", ":"))
            compiles.append(time.perf_counter() - t)
            matcher, mask, steps = xgr.GrammarMatcher(compiled), xgr.allocate_token_bitmask(1, vocab), []
            for token in ids:
                t = time.perf_counter()
                matcher.fill_next_token_bitmask(mask, 0)
                steps.append(time.perf_counter() - t)
                assert matcher.accept_token(token)
        report("xgrammar", setup, compiles, steps)

    try:
        from outlines_core import Guide, Index, Vocabulary
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError:
        print("outlines-core  not installed")
    else:
        t = time.perf_counter()
        by_token: dict[str, list[int]] = {}
        for token, i in tok._tk.get_vocab().items():
            if i != stop:
                by_token.setdefault(token, []).append(i)
        outlines_vocab = Vocabulary(stop, by_token)
        setup = time.perf_counter() - t
        compiles = []
        for _ in range(2):
            t = time.perf_counter()
            index = Index(build_regex_from_schema(json.dumps(SCHEMA)), outlines_vocab)
            compiles.append(time.perf_counter() - t)
            guide, steps = Guide(index), []
            for token in ids:
                t = time.perf_counter()
                guide.get_tokens()
                steps.append(time.perf_counter() - t)
                guide.advance(token)
        report("outlines-core", setup, compiles, steps)
    write_json(args, {"model": name, "vocabulary": vocab, "object_tokens": len(ids), "libraries": RESULTS})
