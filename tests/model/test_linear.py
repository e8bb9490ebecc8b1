"""Packed CPU weights and the MLP's row blocks change no bit of what the plain weights compute."""

import pytest
import torch
import torch.nn.functional as F

from quail.executor.model_runner import Chunk
from quail.executor.sequence import Seq
from quail.model.linear import Linear
from tests.conftest import quail_from_hf, tiny_hf_model
from tests.model.test_reference import _runner

bf16_packs = pytest.mark.skipif(not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
                                reason="oneDNN without bf16 on this CPU")


@bf16_packs
@pytest.mark.parametrize("rows", [1, 5, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_bf16_weight_gives_the_plain_weights_bits(rows, bias):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(96, 64, generator=g).bfloat16()
    b = torch.randn(96, generator=g).bfloat16() if bias else None
    x = torch.randn(rows, 64, generator=g).bfloat16()
    linear = Linear(w, b)
    assert linear.packed and linear.nbytes == w.nbytes + (b.nbytes if bias else 0)
    assert torch.equal(linear(x), F.linear(x, w, b))


def test_fp32_weights_stay_plain():
    w = torch.randn(8, 4)
    linear = Linear(w)
    assert not linear.packed and linear.weight is w


@pytest.mark.model  # tiny_hf_model
@bf16_packs
def test_the_mlp_in_row_blocks_changes_no_bit():
    model = quail_from_hf(tiny_hf_model("qwen2"), torch.bfloat16)
    assert model.mlp_rows is not None and quail_from_hf(tiny_hf_model("qwen2")).mlp_rows is None  # fp32: one block
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 320, (n,), generator=g).tolist() for n in (37, 70, 16)]

    def logits(rows):
        model.mlp_rows = rows
        runner = _runner(model)
        return torch.cat([lp for lp, _ in runner.run([Chunk(Seq(), p, list(range(len(p)))) for p in prompts])])

    whole = logits(None)
    assert torch.equal(logits(7), whole) and torch.equal(logits(64), whole)
