import pytest
import torch

from quail.executor.engine import Engine, PhysicalSettings
from quail.executor.model_runner import Chunk
from quail.executor.sequence import Seq
from quail.model.loader import load_model
from tests.conftest import tiny_hf_model


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_hf_directory_loads_and_matches_transformers(tmp_path, arch, smollm2):
    hf = tiny_hf_model(arch, vocab_size=49152)
    hf.save_pretrained(tmp_path)
    smollm2.tokenizer._tk.save(str(tmp_path / "tokenizer.json"))
    loaded = load_model(str(tmp_path), "float32")
    assert loaded.config.arch == arch and loaded.tokenizer.chat is not None
    ids = loaded.tokenizer.encode("A safetensors directory, loaded like a GPU deployment would.")
    engine = Engine(loaded.model, PhysicalSettings(arena_pages=8))
    [(ours, _)] = engine.scheduler.runner.run([Chunk(Seq(), ids, list(range(len(ids))))])
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0], dim=-1)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-5)
