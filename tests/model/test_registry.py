"""model/registry.py: a split model's parts assembled into one file in their order, whether the
kernel copies them or they are read and written."""

import os
import random

import pytest

from quail.model import registry


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """Two packages of two and one parts of random bytes, and the file they make."""
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path / "home"))
    rng = random.Random(0)
    whole = b""
    for pkg, sizes in (("p1", (70_000, 3)), ("p2", (1 << 17,))):
        (tmp_path / pkg / "data").mkdir(parents=True)
        for k, size in enumerate(sizes):
            data = rng.randbytes(size)
            (tmp_path / pkg / "data" / f"{k:02d}.bin").write_bytes(data)
            whole += data
    monkeypatch.setattr(registry, "package_dir", lambda name: tmp_path / name)
    return registry.EmbeddedModel("split", ("p1", "p2")), whole


def test_parts_are_assembled_in_order(parts):
    model, whole = parts
    assert registry._assemble(model).read_bytes() == whole


def test_a_copy_the_kernel_refuses_part_way_is_finished_by_reading_and_writing(parts, monkeypatch):
    model, whole = parts
    real, calls = os.copy_file_range, []

    def refused_after_a_first_slice(src, dst, count, *args):
        calls.append(count)
        if len(calls) > 1:
            raise OSError(18, "Invalid cross-device link")
        return real(src, dst, min(count, 1000), *args)

    monkeypatch.setattr(os, "copy_file_range", refused_after_a_first_slice)
    assert registry._assemble(model).read_bytes() == whole
    assert calls[0] == 70_000  # the first part's first 1,000 bytes in the kernel, the rest read and written
