"""Engine prefill tokens/s against transformers (bf16 and fp32, padded batch, logits_to_keep=1) on
the same batch of 12 reference documents (bench/common/documents.py), median of 3.

    python -m bench micro prefill [--model qwen2.5-coder-0.5b]
"""

import statistics
import time
from collections.abc import Callable

import torch

from bench.common.documents import reference_documents
from bench.common.results import parser, write_json
from bench.common.systems import left_padded, transformers_model
from quail.executor.model_runner import Chunk
from quail.executor.sequence import Seq
from quail.session import Session


def median_seconds(fn: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = parser(__name__, __doc__)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    args = ap.parse_args(argv)
    model = args.model
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

    def transformers_prefill(dtype: torch.dtype) -> Callable[[], None]:
        hf = transformers_model(model, dtype)

        def run():
            with torch.inference_mode():
                hf(input_ids=ids, attention_mask=mask, logits_to_keep=1)
        return run

    quail_prefill()  # warm up
    tq = median_seconds(quail_prefill)
    print(f"{torch.get_num_threads()} threads; quail's --dtype auto: {engine.model.dtype} ({s.loaded.dtype_why})")
    print(f"prefill, {len(batch)} documents, {tokens} tokens ({ids.numel()} padded for transformers):")
    print(f"  quail ({engine.model.dtype}) {tokens / tq:8.0f} tok/s  ({tq:.2f} s)")
    systems = [{"system": "quail", "dtype": str(engine.model.dtype).removeprefix("torch."), "seconds": tq,
                "tokens_per_s": tokens / tq}]
    for dtype in (torch.bfloat16, torch.float32):
        run = transformers_prefill(dtype)
        run()
        th = median_seconds(run)
        print(f"  transformers ({dtype}) {tokens / th:8.0f} tok/s  ({th:.2f} s); quail is {th / tq:.2f}x")
        systems.append({"system": "transformers", "dtype": str(dtype).removeprefix("torch."), "seconds": th,
                        "tokens_per_s": tokens / th, "quail_x": th / tq})
    write_json(args, {"model": model, "documents": len(batch), "tokens": tokens, "padded_tokens": ids.numel(),
                      "dtype_why": s.loaded.dtype_why, "systems": systems})
