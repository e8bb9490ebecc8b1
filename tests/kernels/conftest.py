"""The kernel tests run the Triton kernel in Triton's interpreter on the CPU. Its module is imported
here, under TRITON_INTERPRET, before the tests' own imports: the decoration reads the variable once,
so nothing may import the module first. The interpreter reads it again while it runs, so it is set
for these tests and for no others."""

import importlib
import os

import pytest

os.environ["TRITON_INTERPRET"] = "1"
try:
    importlib.import_module("quail.kernels.triton_paged_attention")
except ModuleNotFoundError:
    pass  # without the worker extra, the root conftest skips these tests by name
finally:
    del os.environ["TRITON_INTERPRET"]


@pytest.fixture(autouse=True, scope="module")
def _interpret():
    os.environ["TRITON_INTERPRET"] = "1"
    yield
    del os.environ["TRITON_INTERPRET"]
