"""The model's bf16 linear layers on this CPU: `F.linear` on the plain weight (oneDNN repacks it
at every call) against the weight packed once (quail/model/linear.py), at the row counts a writing
step (16) and prefill passes (256, 1,536) bring; and gate/up of 1,536 rows at once against blocks
of 256, as the model's MLP runs them. GFLOP/s, best of 5.

    python -m bench micro linear
"""

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench.common.results import parser, write_json
from quail.model.linear import Linear

# (name, out_features, in_features): qwen2.5-coder-1.5b's and smollm2-135m's projections
SHAPES = [("1.5B gate/up", 17920, 1536), ("1.5B down", 1536, 8960), ("1.5B qkv", 2048, 1536),
          ("135M gate/up", 3072, 576), ("135M down", 576, 1536), ("135M qkv", 960, 576)]
ROWS = (16, 256, 1536)


def best(f: Callable[[], object], repeats: int = 5) -> float:
    f()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    args = parser(__name__, __doc__).parse_args(argv)
    g = torch.Generator().manual_seed(0)
    table = ["| projection | rows | F.linear | packed | packed, blocks of 256 rows |", "|---|---:|---:|---:|---:|"]
    print("\n".join(table))
    rows = []
    for name, n, k in SHAPES:
        w = torch.randn(n, k, generator=g).bfloat16()
        linear = Linear(w)
        assert linear.packed, "oneDNN without bf16 on this CPU: nothing is packed"
        for n_rows in ROWS:
            x = torch.randn(n_rows, k, generator=g).bfloat16()
            gflop = 2 * n_rows * n * k / 1e9
            plain, packed = best(lambda x=x, w=w: F.linear(x, w)), best(lambda x=x, lin=linear: lin(x))
            blocks = (best(lambda x=x, lin=linear: [lin(x[r: r + 256]) for r in range(0, len(x), 256)])
                      if n_rows > 256 else None)
            cell = f"{gflop / blocks:.0f}" if blocks else ""
            table.append(f"| {name} | {n_rows:,} | {gflop / plain:.0f} | {gflop / packed:.0f} | {cell} |")
            print(table[-1], flush=True)
            rows.append({"projection": name, "out_features": n, "in_features": k, "rows": n_rows,
                         "gflops_f_linear": gflop / plain, "gflops_packed": gflop / packed,
                         "gflops_packed_blocks_of_256": gflop / blocks if blocks else None})
    write_json(args, {"dtype": "bfloat16", "timing": "best of 5", "rows": rows}, markdown="\n".join(table) + "\n")
