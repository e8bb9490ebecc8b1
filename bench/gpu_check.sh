#!/usr/bin/env bash
# Kept at this path for the GPU tooling: `bash bench/gpu_check.sh [args]` runs bench/gpu/check.sh.
exec bash "$(dirname "$0")/gpu/check.sh" "$@"
