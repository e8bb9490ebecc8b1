"""A row's vector is the mean of its text's hidden states at the vector layer: the same as
transformers' hidden states, however the scheduler cuts, batches or hands over the document."""

import numpy as np
import pytest
import torch

from quail.executor.engine import Engine, PhysicalSettings
from quail.kinds.join import PairQuestion
from quail.ops.join import run_join
from quail.ops.prompts import YesNoTokens
from quail.ops.vectors import run_vectors
from quail.reuse import Retain, Reuse
from tests.conftest import quail_from_hf, tiny_hf_model

pytestmark = pytest.mark.model
START = 3  # each document's first tokens are its template's, kept out of its vector


def _docs(n, seed):
    rng = np.random.default_rng(seed)
    head = [11, 12, 13]
    return [head + rng.integers(40, 300, size=int(rng.integers(4, 70))).tolist() for _ in range(n)]


@pytest.fixture(scope="module")
def models():
    hf = tiny_hf_model("llama", num_hidden_layers=4)
    return hf, quail_from_hf(hf)


def _reference(hf, doc, layer):
    with torch.no_grad():
        out = hf(torch.tensor([doc]), output_hidden_states=True)
    return out.hidden_states[layer][0, START:].mean(0).numpy()


@pytest.mark.parametrize("max_batch_tokens", [16, 256])  # documents cut across passes, and many to a pass
def test_vectors_are_the_mean_hidden_state_after_the_vector_layer(models, max_batch_tokens):
    hf, model = models
    engine = Engine(model, PhysicalSettings(arena_pages=64, max_batch_tokens=max_batch_tokens))
    docs = _docs(9, seed=1)
    vectors, stats = run_vectors(engine, docs, START)
    vectors = vectors.vectors
    assert vectors.shape == (9, model.cfg.hidden_size)
    for doc, v in zip(docs, vectors):
        np.testing.assert_allclose(v, _reference(hf, doc, model.vector_layer), atol=1e-4)
    assert stats.tokens_computed + sum(stats.tokens_reused.values()) == stats.tokens_naive
    assert engine.free_pages == engine.settings.arena_pages


def test_a_retained_or_shared_document_gives_the_same_vector_and_is_kept_for_the_join(models):
    _, model = models
    engine = Engine(model, PhysicalSettings(arena_pages=128, max_batch_tokens=256))
    docs = _docs(6, seed=2)
    docs[1] = docs[0][:40] + docs[1][3:]  # a shared opening past the template
    scratch, _ = run_vectors(engine, docs, START, Reuse.none())
    first, _ = run_vectors(engine, docs, START, retain=Retain())
    again, stats = run_vectors(engine, docs, START, retain=Retain())  # handed the retained documents
    np.testing.assert_allclose(first.vectors, scratch.vectors, atol=1e-5)
    np.testing.assert_allclose(again.vectors, scratch.vectors, atol=1e-5)
    assert stats.tokens_computed + sum(stats.tokens_reused.values()) == stats.tokens_naive
    answers = YesNoTokens(yes=[5], no=[7])
    _, joined = run_join(engine, docs, [[50, 51], [52]], PairQuestion([], [9, 10]), answers, retain=Retain())
    assert joined.tokens_reused["retention"] > 0  # the join's anchors took the vectors' KV
    engine.pool.clear()
    assert engine.free_pages == engine.settings.arena_pages


def test_stored_vectors_are_read_once_and_keyed_by_their_layer(models, tmp_path):
    from quail.ops.stored import Run, Stored
    from quail.ops.vectors import stored_vectors
    from quail.store.sqlite import SqliteStore

    _, model = models
    engine = Engine(model, PhysicalSettings(arena_pages=64, max_batch_tokens=256))
    store = SqliteStore(tmp_path / "answers.sqlite")
    run = Run(engine, stored=Stored(store, "tiny"))
    docs = _docs(5, seed=3)
    first, s1 = stored_vectors(run, docs, START, model.vector_layer)
    again, s2 = stored_vectors(run, docs, START, model.vector_layer)
    assert s1.tokens_reused["store"] == 0 and s2.tokens_computed == 0
    assert s2.tokens_reused["store"] == s2.tokens_naive == sum(map(len, docs))
    assert again.from_store == set(range(5))
    np.testing.assert_array_equal(again.vectors, first.vectors)  # doubles hold float32 exactly
    model.vector_layer += 1  # another layer's vectors are not these
    try:
        other, s3 = stored_vectors(run, docs, START, model.vector_layer)
    finally:
        model.vector_layer -= 1
    assert s3.tokens_reused["store"] == 0 and not np.allclose(other.vectors, first.vectors)
