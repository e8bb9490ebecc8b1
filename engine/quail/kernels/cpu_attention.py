"""Paged attention over bf16 K/V on CPUs with AVX512-BF16: cpu_attention.cpp, fused.

torch's CPU flash kernel runs a row block's small matmuls one head at a time, at 95-160 GFLOP/s in
either dtype where the model's bf16 matmuls run at about 900, and wants K/V gathered out of the pages
and widened first. cpu_attention.cpp reads the pages where they are, shares each K/V block among the
query heads that use it, and scores with the CPU's bf16 dot products. Its results differ from the
fp32 reference (paged_attention.py) only in the order of their sums.

The source has no torch headers: one compiler call builds it in about a second, at first use, into
$QUAIL_HOME under a name that digests the source, the flags and the compiler, with the library's own
sha256 beside it; ctypes loads it only where the two agree (a truncated library would kill the
process as it loads: SIGBUS), and one that does not is built again.
It runs on torch's OpenMP threads (the library it links, libgomp.so.1, is the one torch loaded).
"""

import ctypes
import fcntl
import hashlib
import logging
import os
import shlex
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from quail.device import cpu_info
from quail.errors import QuailError
from quail.paths import home
from quail.trust import owned_file, private_folder

if TYPE_CHECKING:
    from quail.kernels.paged_attention import AttentionMeta

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_attention.cpp")
FLAGS = ("-O3", "-march=x86-64-v4", "-mavx512bf16", "-fopenmp", "-shared", "-fPIC")
NEEDS = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512_bf16"}  # x86-64-v4 and bf16 dots
ROWS = 96  # query rows (over the heads that share a K/V head) per work item: its sums stay in L1/L2
_P, _I = ctypes.c_void_p, ctypes.c_int64


def cpu_flags() -> set[str]:
    return set(cpu_info()[1].split())


_library: ctypes.CDLL | None = None
_unavailable: str | None = None


def library() -> ctypes.CDLL | None:
    """The built kernel, or None with `why_unavailable()` saying why (a CPU without AVX512-BF16, no
    compiler); built once per process."""
    global _library, _unavailable
    if _library is None and _unavailable is None:
        try:
            _library = _load()
        except QuailError as e:
            _unavailable = str(e)
    return _library


def why_unavailable() -> str | None:
    return _unavailable


def _load() -> ctypes.CDLL:
    missing = NEEDS - cpu_flags()
    if missing:
        raise QuailError(f"this CPU lacks {', '.join(sorted(missing))}")
    given = os.environ.get("CXX", "g++")
    try:
        compiler = shlex.split(given)  # as make and CMake read it: "ccache g++" is a launcher and a compiler
        version = subprocess.run([*compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (ValueError, IndexError, OSError, subprocess.CalledProcessError):
        raise QuailError(f"no C++ compiler (CXX={given!r})") from None
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(b"\0".join([source, " ".join(FLAGS).encode(), version.encode()])).hexdigest()[:16]
    folder = private_folder(home() / "kernels")
    path = folder / f"cpu_attention-{digest}.so"
    try:
        with open(folder / ".build.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others then find its build
            if not _verified(path):
                for stale in folder.glob(".cpu_attention-*.tmp"):  # a builder killed with -9 left it
                    stale.unlink()
                tmp = folder / f".{path.name}.{os.getpid()}.tmp"
                built = subprocess.run([*compiler, *FLAGS, "-o", str(tmp), str(SOURCE)], capture_output=True,
                                       text=True)
                if built.returncode != 0:
                    tmp.unlink(missing_ok=True)
                    raise QuailError(f"{given} could not build {SOURCE.name}: {built.stderr.strip()[-400:]}")
                digest_tmp = folder / f".{path.name}.sha256.{os.getpid()}.tmp"
                digest_tmp.write_text(_sha256(tmp))
                os.replace(digest_tmp, _digest_path(path))  # a library that fails to match it is built again
                os.replace(tmp, path)
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise QuailError(f"{path}: {e.strerror or e}") from None
    lib.quail_cpu_attention.argtypes = [_P] * 8 + [_I] * 8 + [ctypes.c_float, ctypes.c_int]
    lib.quail_cpu_attention.restype = ctypes.c_int
    return lib


def _digest_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(path: Path) -> bool:
    """Whether the library at `path` is one a builder wrote: its bytes those its digest file names.
    One that is not (truncated, damaged, or of no builder's) is removed, with a warning."""
    if not owned_file(path):
        return False
    digest = _digest_path(path)
    if owned_file(digest) and digest.read_text().strip() == _sha256(path):
        return True
    log.warning("the CPU attention kernel %s is not the library its builder wrote (damaged, or no digest beside "
                "it): it is built again", path)
    path.unlink()
    return False


def _arrays(meta: "AttentionMeta", tokens: int, pages: int) -> tuple[np.ndarray, ...]:
    """The batch's lengths and padded page tables, built once per forward pass (every layer reuses
    them), and checked: the kernel reads what they point at unchecked."""
    if meta._cpu is None:
        for i, t in enumerate(meta.page_tables):
            if len(t) * meta.page_size < meta.k_len[i] or meta.k_len[i] < meta.q_len[i]:
                raise ValueError(f"sequence {i}: {meta.k_len[i]} keys and {meta.q_len[i]} queries on {len(t)} pages")
        table = meta.padded_tables()
        if len(meta.q_len) and (meta.q_start.min() < 0 or (meta.q_start + meta.q_len).max() > tokens):
            raise ValueError(f"the queries' spans run outside the {tokens} query tokens")
        if table.min() < 0 or table.max() >= pages:
            raise ValueError(f"a page table names page {table.min() if table.min() < 0 else table.max()}, "
                             f"outside the {pages} pages of the cache")
        meta._cpu = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in
                          (meta.q_start, meta.q_len, meta.k_len)) + (table,)
    return meta._cpu


def paged_attention_cpu(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: "AttentionMeta",
                        scale: float) -> torch.Tensor:
    """q: [T, H, D] bf16; k_cache, v_cache: [pages, page_size, kv_heads, D] bf16. Returns [T, H, D]."""
    lib = library()
    if lib is None:
        raise QuailError(f"the fused CPU attention kernel is unavailable: {_unavailable}")
    T, H, D = q.shape
    kv_heads, page_size = k_cache.shape[2], k_cache.shape[1]
    if not (q.dtype == k_cache.dtype == v_cache.dtype == torch.bfloat16 and k_cache.shape == v_cache.shape
            and k_cache.shape[3] == D and D % 64 == 0 and H % kv_heads == 0 and q.stride()[1:] == (D, 1)
            and k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError(f"the CPU attention kernel wants bf16, head dims of 64k, each token's heads contiguous and "
                         f"contiguous K/V caches alike; got q {tuple(q.shape)} {q.dtype}, K {tuple(k_cache.shape)} "
                         f"{k_cache.dtype}, V {tuple(v_cache.shape)}")
    if meta.page_size != page_size:
        raise ValueError(f"pages of {meta.page_size} tokens in the batch, of {page_size} in the cache")
    q_start, q_len, k_len, table = _arrays(meta, T, k_cache.shape[0])
    out = torch.empty_like(q)
    rows = max(1, ROWS // (H // kv_heads))
    if lib.quail_cpu_attention(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(),
                               q_start.ctypes.data, q_len.ctypes.data, k_len.ctypes.data, table.ctypes.data,
                               len(q_len), table.shape[1], q.stride(0), H, kv_heads, D, page_size, rows, scale,
                               torch.get_num_threads()) != 0:
        raise MemoryError("the CPU attention kernel could not have its scratch memory")
    return out
