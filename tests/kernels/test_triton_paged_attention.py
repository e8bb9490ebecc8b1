"""The Triton paged-attention kernel against the torch reference, in Triton's interpreter on the
CPU (small shapes), and compiled for Hopper (sm_90) to check it builds without register spills.
The kernel module is imported under TRITON_INTERPRET by conftest.py."""

import os
import re
import subprocess
import sys

import pytest
import torch

from quail.kernels.paged_attention import paged_attention_reference
from quail.kernels.triton_paged_attention import paged_attention_kernel, paged_attention_triton
from tests.kernels.test_paged_attention import ragged_batch


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


def _ptxas(arch: int) -> str:
    from triton.backends.nvidia.compiler import get_ptxas  # the ptxas Triton itself uses for arch

    return get_ptxas(arch).path


@pytest.mark.services  # a Python process that compiles the kernel, and ptxas
@pytest.mark.parametrize("group,head_dim", [(1, 64), (7, 64), (8, 128)])
def test_compiles_for_hopper_without_spills(tmp_path, group, head_dim):
    """In a process of its own, where the kernel module is decorated for the compiler."""
    ptx = tmp_path / "kernel.ptx"
    code = ("import sys; from quail.kernels.triton_paged_attention import compile_ptx; "
            f"open(sys.argv[1], 'w').write(compile_ptx(90, {group}, {head_dim}))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_DEFAULT_FP_FUSION": "1"}
    subprocess.run([sys.executable, "-c", code, str(ptx)], env=env, check=True, capture_output=True)
    report = subprocess.run([_ptxas(90), "-v", "--gpu-name", "sm_90a", str(ptx), "-o", str(tmp_path / "k.cubin")],
                            capture_output=True, text=True, check=True).stderr
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
    assert spills and not any(spills), report
