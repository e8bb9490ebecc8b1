"""The whole engine with the Triton paged-attention kernel selected, in Triton's interpreter on the
CPU: a filter, a classify and a join on a tiny random model give the torch path's answers (fp32,
1e-4) and its token accounting. The kernel module is imported under TRITON_INTERPRET by
conftest.py."""

import pytest
import torch

from quail.executor.engine import PhysicalSettings
from quail.model.config import ModelConfig
from quail.model.llama import LlamaModel
from quail.model.loader import LoadedModel
from quail.session import Session
from tests.conftest import tiny_hf_model


DOCS = ["The striker scored twice.", "Rates rose again today.", "The striker scored twice in the cup final.",
        "A new phone chip."]
HEADLINES = ["Goals in the cup", "Bank rates"]


@pytest.fixture(scope="module")
def sessions(smollm2):
    """The same tiny random weights (with smollm2's vocabulary, for its tokenizer) under each kernel."""
    hf = tiny_hf_model("llama", vocab_size=smollm2.config.vocab_size, hidden_size=32, intermediate_size=64)
    cfg = ModelConfig.from_hf(hf.config.to_dict())
    weights = dict(hf.state_dict())
    out = {}
    for attention in ("torch", "triton"):
        model = LlamaModel(cfg, weights, torch.float32, "cpu", attention=attention)
        out[attention] = Session(LoadedModel("tiny", cfg, model, smollm2.tokenizer),
                                 PhysicalSettings(arena_pages=64, max_batch_tokens=64))
    return out


def _same(a, b):
    flat = lambda x: [v for row in x for v in (row if isinstance(row, list) else [row]) if v is not None]
    assert flat(a) == pytest.approx(flat(b), abs=1e-4)


def test_the_kernel_is_the_one_selected(sessions):
    from quail.kernels.paged_attention import paged_attention_reference

    assert sessions["torch"].engine.model.attention is paged_attention_reference
    assert sessions["triton"].engine.model.attention is not paged_attention_reference


def test_filter_classify_and_join_agree_with_the_torch_path(sessions):
    runs = {}
    for name, s in sessions.items():
        f, fs = s.filter(DOCS, ["Is this about sport?", "Is a goal mentioned?"], threshold=0.0)
        c, cs = s.classify(DOCS, ["sport", "money", "tech"])
        j, js = s.join(DOCS[:2], HEADLINES, "The headline fits the article.")
        runs[name] = (f, fs, c, cs, j, js)
    (f1, fs1, c1, cs1, j1, js1), (f2, fs2, c2, cs2, j2, js2) = runs["torch"], runs["triton"]
    _same(f1.p_yes, f2.p_yes)
    _same(c1.probabilities, c2.probabilities)
    _same(j1.p_yes, j2.p_yes)
    for a, b in ((fs1, fs2), (cs1, cs2), (js1, js2)):
        assert (a.tokens_computed, a.tokens_naive, a.tokens_reused) == (b.tokens_computed, b.tokens_naive,
                                                                        b.tokens_reused)
    assert fs2.tokens_reused["rewind"] > 0 and fs2.tokens_reused["sharing"] > 0  # reuse ran through the kernel
