#!/usr/bin/env bash
# The one prepared GPU check (issue 12): on a CUDA machine with torch, triton and transformers
# (the lent H200: Python 3.12, torch 2.11, triton 3.6, transformers 5.17, no network, no gguf, no
# pydantic), from the repository root, with SmolLM2's tokenizer.json in .gpu/ (or --tokenizer PATH, or $QUAIL_TOKENIZER):
#   bash bench/gpu_check.sh                      # 78 s on an H200 (2026-12-04), with the start 85 s
#   bash bench/gpu_check.sh --device cpu --small # the smoke run on a CPU
# (bench/gpu_check.sh runs this file.) Prints the tables and the targets; writes $OUT/gpu.json (after
# every section) and $OUT/gpu.md; any extra arguments go to `python -m bench gpu check`
# (bench/gpu/check.py). .gpu/ is written on the CPU machine by
#   python -m bench gpu prepare .gpu   # tokenizer.json 3.5 MB, documents.json 0.24 MB,
#                                      # wheels/ 5.9 MB (pydantic, llguidance, for cp312)
# (or, at its old path, PYTHONPATH=engine python bench/gpu_w1.py --prepare .gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/engine${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader 2>/dev/null || true
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
# The engine imports pydantic and llguidance, which the GPU machine lacks: unpack what .gpu/wheels
# brings (wheels for its Python) for any module that does not import there.
for wheel in .gpu/wheels/*.whl; do
  [ -e "$wheel" ] || continue
  module="$(basename "$wheel" | cut -d- -f1)"
  "$PYTHON" -c "import $module" 2>/dev/null && continue
  "$PYTHON" -m zipfile -e "$wheel" .gpu/site && echo "unpacked $(basename "$wheel")"
  export PYTHONPATH="$PYTHONPATH:$PWD/.gpu/site"
done
exec "$PYTHON" -m bench gpu check --output-json "$OUT/gpu.json" "$@"
