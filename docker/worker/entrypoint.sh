#!/bin/sh
# Serves on every interface of the container, so a token is required: the worker admits only the
# tasks that hold it (the quail connection's password).
set -eu
if [ -z "${QUAIL_WORKER_TOKEN:-}" ]; then
    echo "quail-worker: set QUAIL_WORKER_TOKEN (the quail connection's password)" >&2
    exit 2
fi
exec quail worker serve --host 0.0.0.0 --port 8815 --model "$QUAIL_MODEL" --device "$QUAIL_DEVICE" "$@"
