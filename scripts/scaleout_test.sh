#!/usr/bin/env bash
# `make scaleout-test`: the container image, built from Debian packages alone (no registry
# needed), run as separate web, worker and beat containers on this machine's PostgreSQL and
# Redis; scripts/scaleout_check.py says what is checked. Needs root, podman, runc and
# debootstrap (apt-get install podman runc debootstrap; .ci/run installs them).
# Env: SCALEOUT_REDIS_DB (9; its cache uses the next), SCALEOUT_PG_DB (memoryhub_scaleout),
# SCALEOUT_KEEP=1 leaves the containers running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}
BASE=localhost/memoryhub-base:bookworm
IMAGE=${SCALEOUT_IMAGE:-localhost/memoryhub:scaleout}

t0=$(date +%s)
deploy/podman/base-image.sh "$BASE"
t1=$(date +%s)
make --no-print-directory image BASE_IMAGE="$BASE" IMAGE="$IMAGE"
t2=$(date +%s)
echo "base image: $((t1 - t0)) s; wheelhouse + image: $((t2 - t1)) s;" \
  "size: $(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"

python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
SCALEOUT_IMAGE="$IMAGE" "$python" scripts/scaleout_check.py
