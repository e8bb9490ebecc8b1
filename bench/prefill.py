"""Engine prefill tokens/s against transformers (bf16 and fp32, padded batch, logits_to_keep=1) on
the same batch of 12 reference documents (bench/documents.py).

    .venv/bin/python bench/prefill.py [MODEL]
"""

import statistics
import sys
import time

import torch

from documents import reference_documents
from quail.executor.model_runner import Chunk
from quail.executor.sequence import Seq
from quail.session import Session
from systems import left_padded, transformers_model


def median_seconds(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(model="qwen2.5-coder-0.5b"):
    torch.set_num_threads(torch.get_num_threads())
    s = Session.open(model, "auto", max_batch_tokens=4096)
    batch = [s.layout.document(d) for d in reference_documents(12, s.loaded.tokenizer)]
    tokens = sum(map(len, batch))
    engine = s.engine

    def quail_prefill():
        seqs = [Seq() for _ in batch]
        engine.scheduler.runner.run([Chunk(q, ids, [len(ids) - 1]) for q, ids in zip(seqs, batch)])
        for q in seqs:
            engine.cache.release(q)

    ids, mask = left_padded(batch)

    def transformers_prefill(dtype):
        hf = transformers_model(model, dtype)

        def run():
            with torch.inference_mode():
                hf(input_ids=ids, attention_mask=mask, logits_to_keep=1)
        return run

    quail_prefill()  # warm up
    tq = median_seconds(quail_prefill)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"{cpu}, {torch.get_num_threads()} threads; quail's --dtype auto: {engine.model.dtype} ({s.loaded.dtype_why})")
    print(f"prefill, {len(batch)} documents, {tokens} tokens ({ids.numel()} padded for transformers):")
    print(f"  quail ({engine.model.dtype}) {tokens / tq:8.0f} tok/s  ({tq:.2f} s)")
    for dtype in (torch.bfloat16, torch.float32):
        run = transformers_prefill(dtype)
        run()
        th = median_seconds(run)
        print(f"  transformers ({dtype}) {tokens / th:8.0f} tok/s  ({th:.2f} s); quail is {th / tq:.2f}x")


if __name__ == "__main__":
    main(*sys.argv[1:])
