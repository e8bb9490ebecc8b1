"""Attention's share of Quail's time on the W1 filter (40 documents, reuse on) in fp32 and bf16 on
this CPU: the model's attention call timed, against the whole filter's wall time (best of 3).

    python -m bench micro attention_share
"""

import time

from bench.common.documents import PREDICATES, reference_documents
from bench.common.results import parser, write_json
from quail.session import Session


def main(argv: list[str] | None = None) -> None:
    args = parser(__name__, __doc__).parse_args(argv)
    runs = []
    for dtype in ("float32", "bfloat16"):
        s = Session.open("smollm2-135m", dtype, device="cpu")
        texts = reference_documents(40, s.loaded.tokenizer)
        s.filter(texts[:4], PREDICATES, 0.0, reuse=False, calibration="none")  # warm up
        model, spent = s.engine.model, [0.0]
        attend = model.attention

        def timed(*args: object, attend: object = attend, spent: list[float] = spent) -> object:
            t = time.perf_counter()
            out = attend(*args)
            spent[0] += time.perf_counter() - t
            return out

        model.attention = timed
        best = None
        for _ in range(3):
            spent[0] = 0.0
            t = time.perf_counter()
            r, stats = s.filter(texts, PREDICATES, 0.0, reuse=True, calibration="none")
            wall = time.perf_counter() - t
            if best is None or wall < best[0]:
                best = (wall, spent[0], stats.tokens_computed)
        wall, attn, tokens = best
        runs.append({"dtype": dtype, "attention": s.engine.model.attention_name, "tokens_computed": tokens,
                     "seconds": wall, "tokens_per_s": tokens / wall, "attention_s": attn,
                     "attention_share": attn / wall})
        print(f"{dtype} ({s.engine.model.attention_name} attention): {tokens:,} tokens in {wall:.2f} s "
              f"({tokens / wall:,.0f} tok/s); attention {attn:.2f} s ({attn / wall:.1%})", flush=True)
    write_json(args, {"model": "smollm2-135m", "documents": 40, "timing": "best of 3", "runs": runs})
