"""The fused bf16 CPU attention kernel against the torch reference and attention written out in fp64,
its rows' independence from their batch, its choice by `auto`, and its build."""

import os
import re
import stat
import subprocess
import sys

import numpy as np
import pytest
import torch

from quail.kernels import cpu_attention
from quail.kernels.attention import select_attention
from quail.kernels.paged_attention import AttentionMeta, paged_attention_reference
from tests.kernels.test_paged_attention import RAGGED, _written_out, ragged_batch

runs_here = pytest.mark.skipif(cpu_attention.library() is None,
                               reason=f"no fused CPU attention here: {cpu_attention.why_unavailable()}")
SHAPES = [(9, 3, 64), (12, 2, 128), (4, 4, 64)]  # SmolLM2's heads, Qwen2.5-1.5B's, and no grouping


def _alone(q, k, v, meta, s):
    """Sequence s of the batch as a batch of its own."""
    at, ql = int(meta.q_start[s]), int(meta.q_len[s])
    one = AttentionMeta(np.array([0]), meta.q_len[s:s + 1], meta.k_len[s:s + 1], [meta.page_tables[s]],
                        meta.page_size, meta.device)
    return cpu_attention.paged_attention_cpu(q[at:at + ql].contiguous(), k, v, one, 0.125)


@runs_here
@pytest.mark.parametrize("heads,kv_heads,dim", SHAPES)
def test_the_kernel_is_the_reference_but_for_the_order_of_its_sums(heads, kv_heads, dim):
    q, k, v, meta = ragged_batch(RAGGED, heads, kv_heads, dim, torch.bfloat16)
    got = cpu_attention.paged_attention_cpu(q, k, v, meta, dim ** -0.5)
    ref = paged_attention_reference(q, k, v, meta, dim ** -0.5)
    truth = _written_out(q, k, v, meta, dim ** -0.5)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    torch.testing.assert_close(got.double(), truth, atol=2e-2, rtol=2e-2)
    # Both round an fp32 result to bf16: where the sums' order moves it across a rounding boundary, one
    # ulp apart; where the values cancel to almost nothing, apart by fp32's rounding of the terms
    ulp = torch.maximum(got.float().abs(), ref.float().abs()) * 2.0 ** -7
    assert ((got.float() - ref.float()).abs() <= ulp.clamp(min=1e-6)).all()
    assert (got == ref).float().mean() > 0.99
    assert (got.double() - truth).abs().mean() <= 1.05 * (ref.double() - truth).abs().mean()


@runs_here
def test_a_rows_result_does_not_depend_on_its_batch(monkeypatch):
    q, k, v, meta = ragged_batch(RAGGED, 9, 3, 64, torch.bfloat16, seed=1)
    whole = cpu_attention.paged_attention_cpu(q, k, v, meta, 0.125)
    for s in range(len(RAGGED)):
        at, ql = int(meta.q_start[s]), int(meta.q_len[s])
        assert torch.equal(_alone(q, k, v, meta, s), whole[at:at + ql])
    monkeypatch.setattr(cpu_attention, "ROWS", 7)  # other work items: rows split otherwise over threads
    assert torch.equal(cpu_attention.paged_attention_cpu(q, k, v, meta, 0.125), whole)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert torch.equal(cpu_attention.paged_attention_cpu(q, k, v, meta, 0.125), whole)
    finally:
        torch.set_num_threads(threads)


@runs_here
def test_queries_strided_as_the_model_splits_them():
    q, k, v, meta = ragged_batch(RAGGED, 9, 3, 64, torch.bfloat16, seed=2)
    qk = torch.cat([q, torch.randn(q.shape[0], 3, 64).bfloat16()], dim=1)  # q's heads, then k's
    strided = qk[:, :9]
    assert not strided.is_contiguous()
    assert torch.equal(cpu_attention.paged_attention_cpu(strided, k, v, meta, 0.125),
                       cpu_attention.paged_attention_cpu(q, k, v, meta, 0.125))


@runs_here
def test_what_the_kernel_would_read_out_of_bounds_is_refused():
    q, k, v, meta = ragged_batch(RAGGED, 9, 3, 64, torch.bfloat16)
    meta.page_tables[2][-1] = k.shape[0]  # one page past the cache
    with pytest.raises(ValueError, match=f"page table names page {k.shape[0]}, outside the {k.shape[0]} pages"):
        cpu_attention.paged_attention_cpu(q, k, v, meta, 0.125)
    q, k, v, meta = ragged_batch(RAGGED, 9, 3, 64, torch.bfloat16)
    meta.page_tables[1].pop()  # fewer pages than its keys need
    with pytest.raises(ValueError, match="sequence 1: 175 keys and 140 queries on 10 pages"):
        cpu_attention.paged_attention_cpu(q, k, v, meta, 0.125)
    q, k, v, meta = ragged_batch(RAGGED, 9, 3, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="outside the 100 query tokens"):
        cpu_attention.paged_attention_cpu(q[:100], k, v, meta, 0.125)
    with pytest.raises(ValueError, match="wants bf16"):
        cpu_attention.paged_attention_cpu(q, k.float(), v.float(), meta, 0.125)
    with pytest.raises(ValueError, match="wants bf16"):
        cpu_attention.paged_attention_cpu(q[..., :32], k[..., :32], v[..., :32], meta, 0.125)


@runs_here
def test_auto_takes_the_kernel_for_bf16_only():
    cpu = torch.device("cpu")
    fn, name, why = select_attention("auto", cpu, torch.bfloat16, 64)
    assert fn is cpu_attention.paged_attention_cpu and name == "cpu" and "AVX512-BF16" in why
    fn, name, why = select_attention("auto", cpu, torch.float32, 64)
    assert fn is paged_attention_reference and name == "torch" and "float32" in why
    assert select_attention("auto", cpu, torch.bfloat16, 80)[0] is paged_attention_reference
    assert select_attention("torch", cpu, torch.bfloat16, 64)[0] is paged_attention_reference
    with pytest.raises(ValueError, match="attention 'cpu': float32"):
        select_attention("cpu", cpu, torch.float32, 64)
    with pytest.raises(ValueError, match="attention 'cpu': device cuda"):
        select_attention("cpu", torch.device("cuda"), torch.bfloat16, 64)


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """A process that has not built the kernel yet, with its own QUAIL_HOME."""
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    monkeypatch.setattr(cpu_attention, "_library", None)
    monkeypatch.setattr(cpu_attention, "_unavailable", None)
    return tmp_path


@pytest.mark.slow  # builds the kernel in fresh processes: tens of seconds, out of test-fast
@runs_here
def test_builders_at_once_build_it_once_and_leave_nothing_else(fresh_build):
    folder = fresh_build / "kernels"
    folder.mkdir(mode=0o700)
    (folder / ".cpu_attention-0123456789abcdef.so.4242.tmp").write_bytes(b"half")  # a builder killed with -9
    code = "from quail.kernels import cpu_attention as c; assert c.library() is not None, c.why_unavailable()"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(["engine", os.environ.get("PYTHONPATH", "")])}
    builders = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(3)]
    assert [b.wait(timeout=120) for b in builders] == [0, 0, 0]
    built = sorted(p.name for p in folder.iterdir())
    assert len(built) == 3 and built[0] == ".build.lock" and re.fullmatch(r"cpu_attention-[0-9a-f]{16}\.so", built[1])
    assert built[2] == f"{built[1]}.sha256"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert cpu_attention.library() is not None and len(list(folder.iterdir())) == 3  # this process finds it


@pytest.mark.slow  # builds the kernel in fresh processes: tens of seconds, out of test-fast
@runs_here
@pytest.mark.parametrize("damage", ["truncated", "no digest"])
def test_a_damaged_library_is_built_again_never_loaded(fresh_build, damage):
    """#48 7: a library of the right name truncated to 1,000 bytes killed the process (SIGBUS) as
    ctypes loaded it, on every start."""
    code = "from quail.kernels import cpu_attention as c; assert c.library() is not None, c.why_unavailable()"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(["engine", os.environ.get("PYTHONPATH", "")])}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
    [library] = (fresh_build / "kernels").glob("*.so")
    if damage == "truncated":
        library.write_bytes(library.read_bytes()[:1000])
    else:
        library.with_name(f"{library.name}.sha256").unlink()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # not -7 (SIGBUS)
    assert "not the library its builder wrote" in done.stderr and library.stat().st_size > 1000


@runs_here
def test_a_compiler_command_with_a_launcher_builds(fresh_build, monkeypatch):
    """#48 16: CXX="ccache g++" was taken as one program's name, and the kernel silently fell back."""
    monkeypatch.setenv("CXX", "env g++")
    assert cpu_attention.library() is not None, cpu_attention.why_unavailable()


def test_without_a_compiler_auto_falls_back_and_says_why(fresh_build, monkeypatch):
    monkeypatch.setenv("CXX", str(fresh_build / "no-such-compiler"))
    monkeypatch.setattr(cpu_attention, "cpu_flags", lambda: cpu_attention.NEEDS)
    assert cpu_attention.library() is None
    fn, name, why = select_attention("auto", torch.device("cpu"), torch.bfloat16, 64)
    assert fn is paged_attention_reference and name == "torch" and "no C++ compiler" in why
    with pytest.raises(ValueError, match="no C\\+\\+ compiler"):
        select_attention("cpu", torch.device("cpu"), torch.bfloat16, 64)


def test_a_cpu_without_bf16_dot_products_keeps_the_reference(fresh_build, monkeypatch):
    monkeypatch.setattr(cpu_attention, "cpu_flags", lambda: cpu_attention.NEEDS - {"avx512_bf16"})
    assert cpu_attention.library() is None and "lacks avx512_bf16" in cpu_attention.why_unavailable()


@runs_here
def test_a_kernels_folder_others_may_write_is_refused(fresh_build):
    folder = fresh_build / "kernels"
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o777)
    assert cpu_attention.library() is None and "writable by other users" in cpu_attention.why_unavailable()
    assert list(folder.iterdir()) == []


@pytest.mark.model  # tiny_hf_model
@runs_here
def test_a_bf16_model_on_the_kernel_is_as_near_fp32_as_on_the_reference():
    from quail.executor.model_runner import Chunk
    from quail.executor.sequence import Seq
    from quail.model.config import ModelConfig
    from quail.model.llama import LlamaModel
    from tests.conftest import tiny_hf_model
    from tests.model.test_reference import _runner

    hf = tiny_hf_model("qwen2", hidden_size=384, num_attention_heads=6, num_key_value_heads=2, intermediate_size=256)
    cfg, weights = ModelConfig.from_hf(hf.config.to_dict()), dict(hf.state_dict())
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, 320, (n,), generator=g).tolist() for n in (150, 37, 70)]

    def logprobs(dtype, attention):
        model = LlamaModel(cfg, weights, dtype, attention=attention)
        runner = _runner(model)
        return model, torch.cat([lp for lp, _ in runner.run([Chunk(Seq(), p, list(range(len(p)))) for p in prompts])])

    _, exact = logprobs(torch.float32, "torch")
    fused_model, fused = logprobs(torch.bfloat16, "auto")
    _, ref = logprobs(torch.bfloat16, "torch")
    assert fused_model.attention_name == "cpu"
    assert (fused - exact).abs().mean() <= 1.1 * (ref - exact).abs().mean()
    assert (fused.argmax(-1) == ref.argmax(-1)).float().mean() > 0.95
