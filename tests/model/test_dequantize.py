"""model/dequantize.py: GGUF blocks dequantized in torch equal gguf-py's numpy, bit for bit, on random
bytes of each type it takes and on every tensor of the embedded smollm2's GGUF."""

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize as dequantize_gguf

from quail.model import dequantize as ours
from quail.model.registry import embedded_path


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.Q8_0,
                                   GGMLQuantizationType.Q5_K])
def test_random_blocks_dequantize_as_gguf_py_does(qtype, monkeypatch):
    monkeypatch.setattr(ours, "CHUNK", 7)  # several chunks, the last one short
    _, width = GGML_QUANT_SIZES[qtype]
    data = np.random.default_rng(int(qtype)).integers(0, 256, (6, 5 * width), dtype=np.uint8)
    got, want = ours.dequantize(data, qtype).numpy(), np.asarray(dequantize_gguf(data, qtype), np.float32)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.array_equal(got, want, equal_nan=True)
    for dtype in (torch.bfloat16, torch.float16):  # rounded a chunk at a time as the whole would be
        rounded = ours.dequantize(data, qtype, dtype)
        assert rounded.dtype == dtype
        torch.testing.assert_close(rounded, torch.from_numpy(want).to(dtype), rtol=0, atol=0, equal_nan=True)


@pytest.mark.model  # reads the embedded smollm2's GGUF
def test_every_tensor_of_a_real_model_dequantizes_as_gguf_py_does():
    tensors = GGUFReader(embedded_path("smollm2-135m")).tensors
    assert {t.tensor_type for t in tensors} & set(ours._BLOCKS)  # some go through ours
    for t in tensors:
        assert np.array_equal(ours.dequantize(t.data, t.tensor_type).numpy(),
                              np.asarray(dequantize_gguf(t.data, t.tensor_type), np.float32)), t.name
