"""Kept at this path for the GPU tooling: `PYTHONPATH=engine python bench/gpu_w1.py --prepare .gpu`
runs `python -m bench gpu prepare .gpu` (bench/gpu/prepare.py)."""

import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # the repository root, where `bench` is a package

from bench.gpu.prepare import main  # noqa: E402

main(sys.argv[1:])
