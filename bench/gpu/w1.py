"""The GPU check's model half (bench/gpu/check.py runs it): a model of Qwen2.5-1.5B's shape with
random weights, built on the device in bf16, with transformers and Quail holding the very same
tensors; then W1 end to end (Quail against transformers one row at a time and in batches of 16)
and engine prefill tokens/s against transformers' padded batches, at several max_batch_tokens.

Nothing on that path reads a model file or imports gguf: the GPU machine has neither weights nor
the gguf package (only bench/gpu/prepare.py, run on the CPU machine, reads the embedded SmolLM2
for its tokenizer). Timing does not depend on the weight values; the answers are checked against the
reference on CPU by the tests, and here only compared with transformers' (bf16, so not exactly).
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.common.systems import Stage, Transformers, decide, left_padded, yes_no
from quail.constants import DEFAULT_MAX_BATCH_TOKENS, PAGE_SIZE
from quail.executor.engine import PhysicalSettings
from quail.executor.model_runner import Chunk, ModelRunner
from quail.executor.sequence import Seq
from quail.model.config import ModelConfig
from quail.model.llama import LlamaModel
from quail.model.loader import LoadedModel
from quail.model.tokenizer import Tokenizer
from quail.session import Session

# Qwen2.5-1.5B's shape. The vocabulary stays Qwen's 151936 rows (the embedding's and the tied head's
# size); SmolLM2's tokenizer (49152 ids) gives the tokens, all of them valid ids below it.
QWEN_1_5B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, head_dim=128, max_position_embeddings=32768,
                 rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False)
SMALL = dict(QWEN_1_5B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)
CUDA_MAX_BATCH_TOKENS = 8192  # the engine's CUDA default when quail.constants does not say


def default_max_batch_tokens(device: torch.device) -> int:
    if device.type == "cuda":
        import quail.constants

        return getattr(quail.constants, "DEFAULT_CUDA_MAX_BATCH_TOKENS", CUDA_MAX_BATCH_TOKENS)
    return DEFAULT_MAX_BATCH_TOKENS


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int, clock) -> tuple[list[float], object]:
    """Wall seconds of `repeats` calls, synchronized around each; fewer when clock.allows(seconds)
    says one more would not fit the script's budget. Returns the times and the last call's result."""
    times, out = [], None
    for i in range(repeats):
        if i and not clock.allows(times[-1]):
            break
        sync(device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times, out


def build_models(device: torch.device, small: bool, seed: int = 0):
    """transformers' Qwen2ForCausalLM with random weights, made on the device in bf16 (SDPA
    attention), and Quail's LlamaModel on the very same tensors."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    cfg_values = SMALL if small else QWEN_1_5B
    cfg = Qwen2Config(**cfg_values)
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    with torch.no_grad():  # transformers starts the Q/K/V biases at zero; random ones exercise Quail's
        for layer in hf.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.02)
    weights = dict(hf.state_dict())  # detached views of the parameters, no copies
    hf_cfg = {k: v for k, v in hf.config.to_dict().items() if v is not None}  # transformers 5: rope_theta None
    qcfg = ModelConfig.from_hf(hf_cfg)
    assert qcfg.rope_theta == cfg_values["rope_theta"], f"Quail reads rope_theta {qcfg.rope_theta}"
    model = LlamaModel(qcfg, weights, torch.bfloat16, device)
    params = sum(p.numel() for p in hf.parameters())
    return hf, model, params


def kv_page_bytes(cfg: ModelConfig, dtype: torch.dtype) -> int:
    return 2 * cfg.num_layers * PAGE_SIZE * cfg.num_kv_heads * cfg.head_dim * torch.finfo(dtype).bits // 8


def quail_session(model: LlamaModel, tokenizer: Tokenizer, kv_bytes: int, max_batch_tokens: int) -> Session:
    """A Session on the model already built, its arena `kv_bytes` of KV (calibrates the cost model)."""
    plan = PhysicalSettings(arena_pages=max(64, kv_bytes // kv_page_bytes(model.cfg, model.dtype)),
                        max_batch_tokens=max_batch_tokens)
    loaded = LoadedModel(name="qwen2.5-1.5b-shape, random weights", config=model.cfg, model=model,
                         tokenizer=tokenizer)
    return Session(loaded, plan)


def documents(n: int, tokenizer: Tokenizer, path: str | None) -> tuple[list[str], list[str], str]:
    """W1's texts and predicates: from `path` (written by bench/gpu/prepare.py: the CPU suite's
    documents, so both machines ask about the same texts) when it exists, else bench/common/documents.py's, made here
    (fewer if this Python's help topics have fewer). Returns texts, predicates and their source."""
    if path and Path(path).is_file():
        saved = json.loads(Path(path).read_text())
        return saved["documents"][:n], saved["predicates"], f"{path} (Python {saved.get('python')})"
    from bench.common.documents import PREDICATES, reference_documents  # pydoc_data: not in every Python

    source = "bench/common/documents.py"
    try:
        return reference_documents(n, tokenizer), PREDICATES, f"{source} (Python {sys.version.split()[0]})"
    except ValueError as e:  # "only K reference documents of ..."
        have = int(str(e).split()[1])
        print(f"  note: {e}; using {have}", flush=True)
        return reference_documents(have, tokenizer), PREDICATES, f"{source}, {have} of {n}"


def median_p(probs) -> float:
    """The suite's threshold (bench/e2e/suite.py): halfway between the two middle P(yes)s."""
    v = sorted(probs)
    k = len(v) // 2
    return float((v[k - 1] + v[k]) / 2) if len(v) > 1 else float(v[0])


def run_w1(s: Session, hf, texts: list[str], predicates: list[str], device: torch.device, repeats: int, clock,
           batch: int = 16, log=print) -> dict:
    """W1: the three-predicate filter in chain mode, Quail against (a) and (b). A warm-up each (Quail:
    the whole workload; transformers: its first `batch` documents), then `repeats` timed runs (median)."""
    probe, _ = s.filter(texts, predicates[:1], 0.0)  # also compiles the kernels
    threshold = median_p(p[0] for p in probe.p_yes)
    s.filter(texts, predicates, threshold)  # warm-up
    quail_times, (result, stats) = timed(lambda: s.filter(texts, predicates, threshold), device, repeats, clock)
    assert s.engine.free_pages == s.engine.settings.arena_pages, "Quail left pages behind"
    log(f"  Quail: {statistics.median(quail_times):.2f} s {[round(t, 2) for t in quail_times]}, "
        f"{stats.tokens_computed:,} of {stats.tokens_naive:,} tokens computed")
    docs = [s.layout.document(t) for t in texts]
    questions = [yes_no(s, s.layout.yes_no_question(p)) for p in predicates]
    stage = Stage("filter", docs, questions, "filter", threshold)
    warm = Stage("filter", docs[:batch], questions, "filter", threshold)  # the first batch's documents
    quail_decisions = {("filter", i): ok for i, ok in enumerate(result.passed)}
    baselines = {}
    for key in ("rowwise", "batched"):
        runner = Transformers(hf, device)

        def run(st=stage, runner=runner, key=key):
            runner.computed = 0
            return decide(st, *(runner.batches(st, batch) if key == "batched" else runner.one_at_a_time(st)))

        with torch.inference_mode():
            run(warm)
        runner.scores.clear()
        times, decisions = timed(run, device, repeats, clock)
        diffs = [abs(p - result.p_yes[d][q]) for (d, q), p in runner.scores.items()
                 if q < len(result.p_yes[d]) and result.p_yes[d][q] is not None]
        baselines[key] = {"seconds": statistics.median(times), "times": times, "tokens_computed": runner.computed,
                          "decisions_equal": sum(decisions[k] == v for k, v in quail_decisions.items())
                          / len(quail_decisions),
                          "p_yes_max_abs_diff": max(diffs) if diffs else None, "p_yes_compared": len(diffs)}
        log(f"  transformers {key}: {baselines[key]['seconds']:.2f} s {[round(t, 2) for t in times]}, "
            f"{runner.computed:,} tokens; decisions equal to Quail's {baselines[key]['decisions_equal']:.3f}, "
            f"max |p_yes diff| {baselines[key]['p_yes_max_abs_diff']}")
    quail_s = statistics.median(quail_times)
    return {"quail_s": quail_s, "rowwise_s": baselines["rowwise"]["seconds"],
            "batched_s": baselines["batched"]["seconds"], "tokens_computed": stats.tokens_computed,
            "tokens_naive": stats.tokens_naive, "x_rowwise": baselines["rowwise"]["seconds"] / quail_s,
            "x_batched": baselines["batched"]["seconds"] / quail_s, "documents": len(texts),
            "document_tokens_mean": sum(map(len, docs)) / len(docs), "predicates": predicates,
            "threshold": threshold, "passed": sum(result.passed), "batch": batch,
            "max_batch_tokens": s.engine.settings.max_batch_tokens, "quail_times": quail_times,
            "stats": stats.to_dict(), "rowwise": baselines["rowwise"], "batched": baselines["batched"]}


def _packed(docs: list[list[int]], limit: int) -> list[list[int]]:
    """Whole documents into passes of at most `limit` tokens (at least one document a pass)."""
    passes, current, size = [], [], 0
    for i, d in enumerate(docs):
        if current and size + len(d) > limit:
            passes.append(current)
            current, size = [], 0
        current.append(i)
        size += len(d)
    return passes + [current] if current else passes


def run_prefill(s: Session, hf, docs: list[list[int]], device: torch.device, budgets: list[int],
                hf_batches: list[int], repeats: int, clock, log=print) -> dict:
    """Every document's prefill with one read at its end. Quail: the engine's ModelRunner over the
    session's paged cache, whole documents packed into passes of each max_batch_tokens; transformers:
    left-padded batches, logits_to_keep=1. tokens/s counts the documents' tokens (not the padding)."""
    tokens = sum(map(len, docs))
    cache = s.engine.cache
    runner = ModelRunner(s.engine.model, cache)

    def quail(limit):
        def run():
            seqs = [Seq() for _ in docs]
            for idx in _packed(docs, limit):
                runner.run([Chunk(seqs[i], docs[i], [len(docs[i]) - 1]) for i in idx])
            for q in seqs:
                cache.release(q)
        return run

    def transformers(size):
        batches = [[t.to(device) for t in left_padded(docs[lo:lo + size])] for lo in range(0, len(docs), size)]

        def run():
            for ids, mask in batches:
                hf(input_ids=ids, attention_mask=mask, logits_to_keep=1)
        return run

    out = {"documents": len(docs), "tokens": tokens, "quail": {}, "transformers": {}}
    for name, sizes, make in (("quail", budgets, quail), ("transformers", hf_batches, transformers)):
        for size in sizes:
            run = make(size)
            timed(run, device, 1, clock)  # warm-up
            times, _ = timed(run, device, repeats, clock)
            sec = statistics.median(times)
            out[name][str(size)] = {"seconds": sec, "tok_s": tokens / sec, "times": times}
            log(f"  {name} {'max_batch_tokens' if name == 'quail' else 'batch'} {size}: {tokens / sec:,.0f} tok/s "
                f"({sec:.3f} s)")
    assert s.engine.free_pages == s.engine.settings.arena_pages, "prefill left pages behind"
    return out
