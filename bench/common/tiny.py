"""The scale benchmarks' model and tables: a tiny random Llama (2 layers, hidden 64, SmolLM2's
tokenizer and its 49,152-token vocabulary) saved as a Hugging Face directory, with which the time
is the engine's own; tables of short random-word documents (20-60 words), or of reference
documents for a real model; and the command prefix that reports a child process's peak RSS.
Everything is made once under out/scale/ and kept."""

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common.results import OUT

SCALE = OUT / "scale"
WORDS = ("match goal team rates bank market phone chip league striker keeper vote court river city "
         "music film storm price coach player season final budget rain trial cloud engine").split()
# python -c PEAK_RSS CMD...: runs CMD (its stdout to stderr) and prints its peak RSS in KiB
PEAK_RSS = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=sys.stderr); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def tiny_model(path: Path = SCALE / "tiny-llama") -> Path:
    """The tiny random Llama, saved at `path` once (seed 0)."""
    if (path / "config.json").exists():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from quail.model.loader import load_model

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    load_model("smollm2-135m", "float32").tokenizer._tk.save(str(path / "tokenizer.json"))
    return path


def table(path: Path, rows: int, model: str = "tiny") -> Path:
    """A Parquet table (id, text) of `rows` documents at `path`, made once: random words for the
    tiny model (seeded by `rows`), reference documents of 250-300 tokens for an embedded one."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if model != "tiny":
        from bench.common.documents import reference_documents
        from quail.model.loader import load_model

        texts = reference_documents(rows, load_model(model, "float32").tokenizer)
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path)
        return path
    rng = random.Random(rows)
    writer = None
    for lo in range(0, rows, 65536):
        n = min(65536, rows - lo)
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(20, 60))) for _ in range(n)]
        batch = pa.table({"id": pa.array(range(lo, lo + n), pa.int64()), "text": texts})
        writer = writer or pq.ParquetWriter(path, batch.schema)
        writer.write_table(batch)
    writer.close()
    return path


def random_words_table(rows: int) -> Path:
    """The tiny model's table of `rows` random-word documents, shared by the scale benchmarks."""
    return table(SCALE / f"docs-{rows}.parquet", rows)
