"""bf16 answers on a CPU depend on torch's thread count (torch's attention sums a one-row query in an
order it sets; oneDNN's GEMMs may split their sums by it on some CPUs), so they are stored under it:
a run at 1 thread is never served answers computed at 2. fp32's, within 1e-4 at any count, are shared."""

import pytest
import torch

from quail.executor.engine import PhysicalSettings
from quail.session import Session
from quail.store import open_store

pytestmark = pytest.mark.model  # load_model(smollm2) and the smollm2 fixture

bf16 = pytest.mark.skipif(not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
                          reason="oneDNN without bf16 on this CPU")

TEXTS = ["The striker scored twice in the derby.", "Rates rose again.", "The keeper saved a penalty."]
ASKED = ["Is this about sport?"]


@pytest.fixture
def set_threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@bf16
def test_bf16_answers_computed_at_2_threads_are_not_served_at_1(tmp_path, set_threads):
    from quail.model.loader import load_model

    loaded = load_model("smollm2-135m", "bfloat16")
    session = Session(loaded, PhysicalSettings(arena_pages=256, max_batch_tokens=512))
    session.store = open_store(str(tmp_path / "answers.sqlite"))
    set_threads(2)
    two = loaded.identity
    _, stats = session.filter(TEXTS, ASKED, calibration="none")
    assert stats.tokens_reused["store"] == 0
    set_threads(1)
    one, stats = session.filter(TEXTS, ASKED, calibration="none")
    assert stats.tokens_reused["store"] == 0 and not one.from_store  # computed at 1 thread, not read
    assert ":threads2:" in two and loaded.identity == two.replace(":threads2:", ":threads1:")
    set_threads(2)
    again, stats = session.filter(TEXTS, ASKED, calibration="none")
    assert again.from_store == set(range(len(TEXTS)))  # at 2 threads, the answers stored at 2


def test_fp32_answers_are_shared_across_thread_counts(smollm2, set_threads):
    set_threads(1)
    one = smollm2.identity
    set_threads(2)
    assert smollm2.identity == one and "threads" not in one
