"""A model's identity is the digest of the bytes it loads: weights edited in place with their size
and modification time kept, or other weights behind an embedded model's name, never find the old
weights' stored answers."""

import hashlib
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from quail.errors import QuailError
from quail.session import Session
from quail.store.sqlite import SqliteStore
from tests.edits import copy_model, scale_tensor_in_place

TEXTS = [f"Report {i}: the home side won {i} to {i % 3}." for i in range(6)] + ["A recipe for bread.", "Rain."]


def _open(model: str, store=None) -> Session:
    s = Session.open(model, "float32", arena_pages=256)
    s.store = store
    return s


def _close(a: list, b: list) -> bool:
    return all(x is y is None or math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-12) for x, y in zip(a, b))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 40), factor=st.sampled_from([0.5, 0.8, 1.25, 2.0]), threshold=st.sampled_from([0.0, 0.5]),
       calibration=st.sampled_from(["none", "contextual"]), predicates=st.integers(1, 2))
@example(which=0, factor=2.0, threshold=0.5, calibration="none", predicates=1)  # lm_head
def test_weights_edited_in_place_never_get_the_old_weights_answers(tiny_model_dir, tmp_path_factory, which, factor,
                                                                   threshold, calibration, predicates):
    folder = tmp_path_factory.mktemp("edited")
    model = copy_model(tiny_model_dir, folder / "model")
    store = SqliteStore(folder / "answers.sqlite")
    asked = ["Is this about sport?", "Does it give a score?"][:predicates]
    old, _ = _open(str(model), store).filter(TEXTS, asked, threshold, calibration=calibration)
    edited = scale_tensor_in_place(model, which, factor)
    stored, stats = _open(str(model), store).filter(TEXTS, asked, threshold, calibration=calibration)
    fresh, _ = _open(str(model)).filter(TEXTS, asked, threshold, reuse=False, calibration=calibration)
    assert stats.tokens_reused["store"] == 0  # nothing of the old weights' answers
    for a, b in zip(stored.raw_p_yes, fresh.raw_p_yes):
        assert _close(a, b)
    assert stored.passed == fresh.passed
    if edited in ("lm_head.weight", "model.norm.weight"):  # the logits scale with these
        assert not all(_close(a, b) for a, b in zip(old.raw_p_yes, fresh.raw_p_yes))


def test_an_embedded_models_identity_is_the_file_it_loads(smollm2, tmp_path, monkeypatch):
    from quail.model import loader

    path = loader.embedded_path("smollm2-135m")
    assert smollm2.identity.split(":")[0] == hashlib.sha256(path.read_bytes()).hexdigest()
    other = tmp_path / "other.gguf"
    data = bytearray(path.read_bytes())
    data[-4096] ^= 0x11  # a quantized weight's byte, deep in the tensor data
    other.write_bytes(bytes(data))
    monkeypatch.setattr(loader, "embedded_path", lambda name: other)
    swapped = loader.load_model("smollm2-135m", "float32")
    assert swapped.identity != smollm2.identity
    assert swapped.identity.split(":")[0] == hashlib.sha256(bytes(data)).hexdigest()


def test_a_model_file_that_changes_while_it_loads_is_refused(tiny_model_dir, tmp_path, monkeypatch):
    from quail.model import loader

    model = copy_model(tiny_model_dir, tmp_path / "model")
    load = loader.load_weights

    def load_then_edit(path):
        loaded = load(path)
        scale_tensor_in_place(model, 0, 2.0)
        return loaded

    monkeypatch.setattr(loader, "load_weights", load_then_edit)
    with pytest.raises(QuailError, match="changed while it was loading"):
        loader.load_model(str(model), "float32")


def test_a_loaded_model_knows_when_its_files_changed(tiny_model_dir, tmp_path):
    from quail.model.loader import load_model

    model = copy_model(tiny_model_dir, tmp_path / "model")
    loaded = load_model(str(model), "float32")
    assert not loaded.changed()
    scale_tensor_in_place(model, 3, 1.25)
    assert loaded.changed()
