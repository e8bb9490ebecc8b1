"""`--dtype auto` on a CPU: bfloat16 where this CPU's bf16 matmuls of the model's shape are clearly
faster than fp32's (at least MARGIN times), else float32. Flags do not tell: a CPU with AMX tiles
runs bf16 fast, an Intel AVX-512 one without them at half fp32's speed, and an AMD EPYC with
avx512_bf16 and no AMX at twice it. Measured once per host (its CPU model, flags, torch and
threads) and shape, in a few milliseconds, and kept in QUAIL_HOME, so that one machine always
chooses alike and its answers stay the same run after run."""

import hashlib
import json
import time
from pathlib import Path

import torch

from quail.atomic import write_text_atomically
from quail.device import cpu_info
from quail.errors import QuailError
from quail.model.linear import Linear
from quail.paths import home
from quail.trust import owned_file

MARGIN = 1.2  # bf16 must be this much faster: a near tie keeps fp32's exactness
TOKENS = 256  # a pass's rows, as prefill batches them
REPEATS = 7


def cpu_dtype(hidden: int, intermediate: int) -> tuple[str, str]:
    """The dtype for a model of these sizes on this CPU, and why, in a few words."""
    key = _host_key(hidden, intermediate)
    path = home() / "cpu-dtype.json"
    known = _read(path)
    if key not in known:
        fp32, bf16 = (_seconds(dtype, hidden, intermediate) for dtype in (torch.float32, torch.bfloat16))
        known[key] = {"float32_s": fp32, "bfloat16_s": bf16}
        try:
            write_text_atomically(path, json.dumps(known, indent=1))
        except QuailError:
            pass  # a full disk: measured again at the next start
    speedup = known[key]["float32_s"] / known[key]["bfloat16_s"]
    chosen = "bfloat16" if speedup >= MARGIN else "float32"
    return chosen, f"bf16 matmuls run {speedup:.2f}x fp32's on this CPU (measured; bf16 at {MARGIN}x or more)"


def _seconds(dtype: torch.dtype, hidden: int, intermediate: int) -> float:
    """The best of a few timings of one MLP projection at the model's sizes."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(TOKENS, hidden, generator=g).to(dtype)
    linear = Linear(torch.randn(intermediate, hidden, generator=g).to(dtype))  # as the model runs it
    linear(x)  # warm-up: the kernel chosen, the memory touched
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        linear(x)
        best = min(best, time.perf_counter() - start)
    return best


def _host_key(hidden: int, intermediate: int) -> str:
    name, flags = cpu_info()
    flags_digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"{name}|{flags_digest}|torch {torch.__version__}|{torch.get_num_threads()} threads|{hidden}x{intermediate}"


def _read(path: Path) -> dict:
    """What earlier starts measured, if the file is this user's own and sound."""
    try:
        if not owned_file(path):
            return {}
        known = json.loads(path.read_text())
    except (OSError, ValueError, QuailError):
        return {}
    sound = {k: v for k, v in known.items() if isinstance(v, dict)
             and all(isinstance(v.get(f), float) and v[f] > 0 for f in ("float32_s", "bfloat16_s"))} \
        if isinstance(known, dict) else {}
    return sound
