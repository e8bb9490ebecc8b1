"""The Triton paged-attention kernel against the torch reference, in Triton's interpreter on the
CPU (small shapes): whole, at each tile of rows, and with each sequence's keys split across programs
and merged; and compiled for Hopper (sm_90) to check it builds without register spills. The kernel
module is imported under TRITON_INTERPRET by conftest.py."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from quail.kernels.paged_attention import AttentionMeta, paged_attention_reference
from quail.kernels.triton_paged_attention import (
    BLOCK_MS,
    SPILL_FREE,
    LaunchConfig,
    Tuner,
    block_m,
    wall_milliseconds,
    candidates,
    kv_splits,
    paged_attention_kernel,
    paged_attention_triton,
)
from tests.kernels.test_paged_attention import PAGE, _written_out, ragged_batch


# (q_len, k_len) per sequence: a prefill, a chunk of a longer prefill, a one-token step, a question
# on a kept document, and a prefill shorter than one page
RAGGED = [(37, 37), (20, 70), (1, 45), (9, 130), (5, 5)]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 2, 16), (7, 1, 32), (2, 2, 24)])
def test_interpreted_kernel_matches_the_reference(heads, kv_heads, dim, dtype, tol):
    from triton.runtime.interpreter import InterpretedFunction

    assert isinstance(paged_attention_kernel, InterpretedFunction), "the kernel module was imported before this test"
    q, k, v, meta = ragged_batch(RAGGED, heads, kv_heads, dim, dtype)
    scale = dim ** -0.5
    got = paged_attention_triton(q, k, v, meta, scale, upcast=dtype == torch.bfloat16)
    want = paged_attention_reference(q.float(), k.float(), v.float(), meta, scale)
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


def _at_the_arenas_end(ragged, heads, kv_heads, dim, dtype):
    """ragged_batch with the last sequence's table ending on the arena's last page, its keys ending
    mid-page: a read past k_len would leave the arena."""
    q, k, v, meta = ragged_batch(ragged, heads, kv_heads, dim, dtype)
    end, swap = k.shape[0] - 1, meta.page_tables[-1][-1]
    tables = [[{swap: end, end: swap}.get(p, p) for p in t] for t in meta.page_tables]
    assert tables[-1][-1] == end and int(meta.k_len[-1]) % PAGE
    meta = AttentionMeta(meta.q_start, meta.q_len, meta.k_len, tables, PAGE, meta.device)
    return q, k, v, meta


# a 0-query sequence in the middle (a sequence with nothing new this pass), one-token steps on long
# and short keys, a question on a kept document, and a prefill; the last ends on the arena's last page
SPLIT_RAGGED = [(9, 300), (0, 40), (1, 333), (21, 21), (1, 3), (7, 270)]


@pytest.mark.parametrize("heads,kv_heads,dim,splits,dtype,tol", [
    (6, 2, 32, 3, torch.float32, 1e-4), (6, 2, 32, 3, torch.float16, 2e-3), (6, 2, 32, 3, torch.bfloat16, 1e-2),
    (5, 5, 16, 3, torch.float32, 1e-4), (6, 2, 32, 8, torch.float32, 1e-4)])
def test_keys_split_across_programs_merge_to_the_reference(heads, kv_heads, dim, splits, dtype, tol):
    """8 splits of 333 keys: splits of 64 keys, the last ones empty for the shorter sequences."""
    q, k, v, meta = _at_the_arenas_end(SPLIT_RAGGED, heads, kv_heads, dim, dtype)
    scale = dim ** -0.5
    got = paged_attention_triton(q, k, v, meta, scale, upcast=dtype == torch.bfloat16, splits=splits)
    want = _written_out(q, k, v, meta, scale)
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("bm", BLOCK_MS)
def test_each_tile_of_rows_gives_the_reference(bm):
    """Groups of 3 heads: tiles of 16 .. 128 rows end inside a token's heads."""
    q, k, v, meta = _at_the_arenas_end(SPLIT_RAGGED, 6, 2, 32, torch.float32)
    got = paged_attention_triton(q, k, v, meta, 0.2, bm=bm, splits=1)
    torch.testing.assert_close(got.double(), _written_out(q, k, v, meta, 0.2), atol=1e-4, rtol=1e-4)
    if bm in (16, 128):
        split = paged_attention_triton(q, k, v, meta, 0.2, bm=bm, splits=2)
        torch.testing.assert_close(split, got, atol=1e-5, rtol=1e-5)


def test_int64_offsets_for_an_arena_past_2_to_the_31_give_the_reference(monkeypatch):
    import quail.kernels.triton_paged_attention as tpa

    monkeypatch.setattr(tpa, "WIDE_ELEMENTS", 1)  # every cache takes the wide path
    q, k, v, meta = _at_the_arenas_end(SPLIT_RAGGED, 6, 2, 32, torch.float32)
    got = paged_attention_triton(q, k, v, meta, 0.2, splits=2)
    torch.testing.assert_close(got.double(), _written_out(q, k, v, meta, 0.2), atol=1e-4, rtol=1e-4)


def test_the_tile_fits_the_batchs_rows():
    assert block_m(np.array([32] * 256), 6, 64) == 64  # 192 rows a question: 128 would pad a third
    assert block_m(np.array([2048] * 4), 6, 64) == 128
    assert block_m(np.array([2048] * 4), 6, 128) == 64  # 128 rows spill at head dim 128
    assert block_m(np.array([20] * 200), 6, 64) == 128  # 120 rows: 128 pads a fifteenth
    assert block_m(np.array([1] * 256), 6, 128) == 16
    assert block_m(np.array([1] * 256), 1, 64) == 16
    assert block_m(np.array([0, 5, 1]), 4, 128) == 16


def test_keys_are_split_only_when_the_programs_leave_the_gpu_idle():
    assert kv_splits(programs=1024, processors=132, longest_k=1056) == 1
    assert kv_splits(programs=16, processors=132, longest_k=4096) == 16  # one document's questions
    assert kv_splits(programs=4, processors=132, longest_k=600) == 2  # at least 256 keys a split
    assert kv_splits(programs=4, processors=132, longest_k=100) == 1
    assert kv_splits(programs=200, processors=132, longest_k=8192) == 2


def test_the_tuner_times_each_candidate_once_per_shape_and_keeps_the_fastest():
    q, k, v, meta = ragged_batch(RAGGED, 4, 2, 16, torch.float32)
    tuner = Tuner()
    launched = []

    def launch(c):
        launched.append(c)
        return paged_attention_triton(q, k, v, meta, 0.25, splits=1, tune=False)

    options = candidates(16, 16)[:3]
    first = tuner.config(("a",), options, launch, wall_milliseconds)
    assert first in options and len(launched) == 2 * len(options)  # a compile and a timing each
    assert tuner.config(("a",), options, launch, wall_milliseconds) == first and len(launched) == 2 * len(options)
    assert tuner.config(("b",), options, launch, None) == options[0]  # untimed: the default, unkept
    assert ("b",) not in tuner.chosen


def test_every_tile_has_spill_free_candidates_at_two_depths():
    for bm, dims in SPILL_FREE:
        c = candidates(bm, dims)
        assert len(set(c)) == len(c) == 2 * len(SPILL_FREE[bm, dims]) and {x.num_stages for x in c} == {2, 3}
    assert {bm for bm, dims in SPILL_FREE if dims == 64} == set(BLOCK_MS)
    # outside the table (forced by a test or a benchmark): one config, which may spill
    assert candidates(128, 128) == [LaunchConfig(64, 8, 2), LaunchConfig(64, 8, 3)]


def _ptxas(arch: int) -> str:
    from triton.backends.nvidia.compiler import get_ptxas  # the ptxas Triton itself uses for arch

    return get_ptxas(arch).path


@pytest.mark.services  # a Python process that compiles the kernel, and ptxas
@pytest.mark.parametrize("call", ["compile_ptx(90, 1, 64, bm=128)", "compile_ptx(90, 7, 64, bm=16)",
                                  "compile_ptx(90, 4, 64, bm=32, split=True)", "compile_ptx(90, 8, 64, bm=64)",
                                  "compile_ptx(90, 6, 128, bm=16)",
                                  "compile_ptx(90, 6, 128, bm=32)", "compile_ptx(90, 6, 128, bm=64)",
                                  "compile_ptx(90, 6, 128, bm=16, split=True)",
                                  "compile_ptx(90, 1, 128, bm=64, split=True, config=LaunchConfig(128, 8, 3))",
                                  "compile_merge_ptx(90, 12, 128)", "compile_merge_ptx(90, 64, 128)"])
def test_compiles_for_hopper_without_spills(tmp_path, call):
    """In a process of its own, where the kernel module is decorated for the compiler."""
    ptx = tmp_path / "kernel.ptx"
    code = ("import sys; from quail.kernels.triton_paged_attention import LaunchConfig, compile_ptx, "
            f"compile_merge_ptx; open(sys.argv[1], 'w').write({call})")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_DEFAULT_FP_FUSION": "1"}
    subprocess.run([sys.executable, "-c", code, str(ptx)], env=env, check=True, capture_output=True)
    report = subprocess.run([_ptxas(90), "-v", "--gpu-name", "sm_90a", str(ptx), "-o", str(tmp_path / "k.cubin")],
                            capture_output=True, text=True, check=True).stderr
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
    assert spills and not any(spills), report
