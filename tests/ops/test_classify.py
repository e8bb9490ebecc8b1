"""A classify's probabilities against the model run from scratch on each label's whole prompt: a
label that begins another ("news" of "news report") is the answer that stops there."""

import numpy as np
import pytest
import torch

from quail.executor.engine import Engine, PhysicalSettings
from quail.ops.classify import run_classify
from quail.reuse import Reuse
from tests.conftest import quail_from_hf, tiny_hf_model

pytestmark = pytest.mark.model  # a random transformers model (tiny_hf_model)

# [20] begins [20, 21], which begins [20, 21, 22]; [30] begins [30, 31]; [40] begins none
LABELS = [[20], [20, 21], [20, 21, 22], [30, 31], [30], [40]]
QUESTION = [9, 10, 11]


def _expected(hf, doc: list[int]) -> list[float]:
    """P(label, then stop): its tokens' probability, times the chance that the next token does not
    go on towards a longer label, all read from one forward pass over doc + question + label."""
    p = []
    for label in LABELS:
        with torch.no_grad():
            lp = torch.log_softmax(hf(torch.tensor([doc + QUESTION + label])).logits[0].double(), dim=-1)
        start = len(doc) + len(QUESTION) - 1
        whole = sum(lp[start + k, t].item() for k, t in enumerate(label))
        onward = {other[len(label)] for other in LABELS if len(other) > len(label) and other[:len(label)] == label}
        going_on = sum(lp[start + len(label), t].exp().item() for t in onward)
        p.append(np.exp(whole) * (1 - going_on))
    return (np.array(p) / sum(p)).tolist()


@pytest.fixture(scope="module")
def models():
    hf = tiny_hf_model("llama")
    return hf, quail_from_hf(hf)


@pytest.mark.parametrize("reuse", [Reuse(), Reuse.none()], ids=["rewind", "scratch"])
def test_labels_that_begin_others_get_the_probability_of_stopping_there(models, reuse):
    hf, model = models
    rng = np.random.default_rng(5)
    docs = [rng.integers(50, 300, size=int(rng.integers(5, 40))).tolist() for _ in range(4)]
    engine = Engine(model, PhysicalSettings(arena_pages=64, max_batch_tokens=256))
    result, _ = run_classify(engine, docs, QUESTION, LABELS, reuse=reuse)
    engine.pool.clear()
    for doc, got in zip(docs, result.probabilities):
        np.testing.assert_allclose(got, _expected(hf, doc), atol=1e-4)
