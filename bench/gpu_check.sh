#!/usr/bin/env bash
# The one prepared GPU check (issue 5): on a CUDA machine with torch and triton installed (the
# lent H200: torch 2.11, triton 3.6, Python 3.12, no internet), from the repository root:
#   bash bench/gpu_check.sh            # about 3 minutes; prints the table, writes $OUT/gpu_check.json
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/engine${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
python3 bench/gpu_check.py --json "${OUT:-/tmp}/gpu_check.json" "$@"
