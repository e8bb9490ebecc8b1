"""The engine's logits against transformers, for the same weights, on ragged batches."""

import pytest
import torch

from quail.executor.kv_cache import PagedKVCache
from quail.executor.model_runner import Chunk, ModelRunner
from quail.executor.sequence import Seq
from quail.kv import KVArena, PageArena
from tests.conftest import quail_from_hf, tiny_hf_model

pytestmark = pytest.mark.model  # random transformers models (tiny_hf_model)

TOL = dict(atol=1e-4, rtol=1e-5)


def _runner(model, pages=256):
    cfg = model.cfg
    kv = KVArena(cfg.num_layers, pages, cfg.num_kv_heads, cfg.head_dim, model.dtype)
    return ModelRunner(model, PagedKVCache(PageArena(pages), kv))


def _reference(hf, ids):
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)


def _ragged_check(hf, model, prompts, chunk_sizes):
    """Prefills all prompts together in chunks of the given sizes and compares every position."""
    runner = _runner(model)
    seqs = [Seq() for _ in prompts]
    got = [[] for _ in prompts]
    done = [0] * len(prompts)
    for size in chunk_sizes:
        chunks, owners = [], []
        for i, ids in enumerate(prompts):
            part = ids[done[i] : done[i] + size]
            if part:
                chunks.append(Chunk(seqs[i], part, list(range(len(part)))))
                owners.append(i)
                done[i] += len(part)
        for i, (out, _) in zip(owners, runner.run(chunks)):
            got[i].append(out)
    assert done == [len(p) for p in prompts]
    worst = 0.0
    for ids, parts in zip(prompts, got):
        ours, ref = torch.cat(parts), _reference(hf, ids)
        torch.testing.assert_close(ours, ref, **TOL)
        worst = max(worst, (ours - ref).abs().max().item())
    return worst


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_tiny_models_match_transformers_on_ragged_batches(arch):
    hf = tiny_hf_model(arch)
    model = quail_from_hf(hf)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 320, (n,), generator=g).tolist() for n in (5, 37, 70, 16)]
    _ragged_check(hf, model, prompts, [70])  # one pass
    _ragged_check(hf, model, prompts, [3, 13, 16, 1, 40])  # chunked prefill, page-straddling chunks


def test_llama3_rope_scaling_and_tied_embeddings_match():
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64, "rope_theta": 500000.0}
    hf = tiny_hf_model("llama", rope_scaling=rope, rope_theta=500000.0, tie_word_embeddings=True)
    model = quail_from_hf(hf)
    assert model.cfg.rope_scaling.kind == "llama3" and model.cfg.tie_embeddings
    prompt = torch.randint(0, 320, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    _ragged_check(hf, model, [prompt, prompt[:77]], [100, 100, 100])


def test_rewind_then_extend_matches_from_scratch(tiny_llama):
    """Rewinding into the middle of a page keeps the page and overwrites its tail."""
    runner = _runner(tiny_llama, pages=8)
    doc, q1, q2 = list(range(10, 30)), [40, 41, 42], [50, 51, 52, 53, 54]
    seq = Seq()
    runner.run([Chunk(seq, doc + q1, [])])
    runner.cache.rewind(seq, len(doc))
    assert len(seq.pages) == 2 and runner.cache.pages.num_used == 2
    [(after_rewind, _)] = runner.run([Chunk(seq, q2, [len(q2) - 1])])
    fresh = Seq()
    [(scratch, _)] = runner.run([Chunk(fresh, doc + q2, [len(doc) + len(q2) - 1])])
    torch.testing.assert_close(after_rewind, scratch, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_smollm2_gguf_matches_transformers(smollm2):
    """The real embedded model: GGUF dequantized (and Q/K un-permuted) by us, and by transformers."""
    from transformers import AutoModelForCausalLM

    from quail.model.registry import embedded_path

    path = embedded_path("smollm2-135m")
    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    tok = smollm2.tokenizer
    prompts = [tok.encode(t) for t in ("The capital of France is", "Write a haiku about the sea.\n" * 6, "12+30=")]
    worst = _ragged_check(hf, smollm2.model, prompts, [9, 64])
    print(f"smollm2-135m: largest |log-prob difference| against transformers {worst:.2e}")
