"""Sizing the KV arena from a device's memory: the arithmetic against fake memory reports, the
checks of an explicit arena_pages, and the sizing of a real model on this CPU."""

import pytest

from quail.device import DeviceMemory, device_memory, resolve_device
from quail.errors import QuailError
from quail.executor.engine import PhysicalSettings
from quail.executor.memory import DEFAULT_CPU_ARENA_BYTES, size_arena

GIB, MIB = 1 << 30, 1 << 20
H200 = DeviceMemory(total=141 * GIB, free=100 * GIB)  # free after the weights were loaded


def test_a_gpu_arena_is_free_memory_times_utilization_less_the_reserve():
    s = size_arena(H200, gpu=True, weights_bytes=3 * GIB, reserve_bytes=2 * GIB, page_bytes=MIB, utilization=0.9,
                   min_pages=512)
    assert s.arena_pages == (90 * 1024 - 2 * 1024)  # 0.9 x 100 GiB - 2 GiB, in 1 MiB pages
    assert (s.weights_bytes, s.reserve_bytes, s.memory_free) == (3 * GIB, 2 * GIB, 100 * GIB)
    half = size_arena(H200, gpu=True, weights_bytes=3 * GIB, reserve_bytes=2 * GIB, page_bytes=MIB, utilization=0.5,
                      min_pages=512)
    assert half.arena_pages == 50 * 1024 - 2 * 1024


def test_an_arena_that_cannot_hold_one_pass_is_a_clear_error():
    small = DeviceMemory(total=8 * GIB, free=GIB)
    with pytest.raises(QuailError, match="one pass of max_batch_tokens needs 512") as e:
        size_arena(small, gpu=True, weights_bytes=6 * GIB, reserve_bytes=900 * MIB, page_bytes=MIB, utilization=0.9,
                   min_pages=512)
    assert "leaves room for 21 KV pages" in str(e.value)  # 0.9 x 1,024 MiB - 900 MiB, in 1 MiB pages
    assert e.value.parameter == "max_batch_tokens"
    with pytest.raises(QuailError, match="gpu_memory_utilization must be in"):
        size_arena(H200, gpu=True, weights_bytes=0, reserve_bytes=0, page_bytes=MIB, utilization=1.5, min_pages=1)


def test_an_explicit_arena_is_taken_as_given_if_it_fits_and_refused_if_not():
    s = size_arena(H200, gpu=True, weights_bytes=0, reserve_bytes=2 * GIB, page_bytes=MIB, utilization=0.9,
                   min_pages=512, arena_pages=100)
    assert (s.arena_pages, s.rule) == (100, "given")  # under one pass: the user's choice
    with pytest.raises(QuailError, match=r"arena_pages 1,000,000,000: .* at most 90,112 pages") as e:
        size_arena(H200, gpu=True, weights_bytes=0, reserve_bytes=2 * GIB, page_bytes=MIB, utilization=0.9,
                   min_pages=512, arena_pages=10**9)
    assert e.value.parameter == "arena_pages"


def test_a_cpu_arena_is_one_gib_of_kv_unless_the_ram_is_short():
    roomy = size_arena(DeviceMemory(24 * GIB, 20 * GIB), gpu=False, weights_bytes=GIB, reserve_bytes=0,
                       page_bytes=MIB, utilization=0.9, min_pages=128)
    assert roomy.arena_pages == DEFAULT_CPU_ARENA_BYTES // MIB and "CPU default" in roomy.rule
    short = size_arena(DeviceMemory(4 * GIB, 512 * MIB), gpu=False, weights_bytes=GIB, reserve_bytes=0,
                       page_bytes=MIB, utilization=0.9, min_pages=128)
    assert short.arena_pages == int(512 * MIB * 0.9) // MIB and "available RAM" in short.rule


def test_a_real_model_is_sized_on_this_cpu(tiny_llama):
    plan = PhysicalSettings.for_model(tiny_llama, max_batch_tokens=256)
    m = plan.memory
    assert m.weights_bytes == tiny_llama.nbytes > 0 and m.reserve_bytes == 0  # not measured on a CPU
    assert plan.arena_pages == DEFAULT_CPU_ARENA_BYTES // m.page_bytes and plan.max_batch_tokens == 256
    assert m.memory_total == device_memory(resolve_device("cpu")).total
    with pytest.raises(QuailError, match="arena_pages"):
        PhysicalSettings.for_model(tiny_llama, arena_pages=m.memory_free // m.page_bytes * 2)
