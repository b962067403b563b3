#!/usr/bin/env bash
# Fills build/wheelhouse with a wheel of every dependency in pyproject.toml (and
# requirements.txt naming them), resolved by the image's own interpreter: pip runs inside
# BASE_IMAGE, so environment markers (python_full_version < "3.11.3" and the like) are those of
# the Python the image will have. The Dockerfile then installs from it with `pip --no-index`.
# Wheels already there are reused (offline when they suffice), so a rerun downloads only what
# changed; copy the folder to a machine without a package index and `make image` builds there.
# Env: CONTAINER (podman), BASE_IMAGE, WHEELHOUSE (build/wheelhouse), PIP_CACHE_DIR_HOST.
set -euo pipefail
cd "$(dirname "$0")/.."
CONTAINER=${CONTAINER:-podman}
BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim-bookworm}
WHEELHOUSE=${WHEELHOUSE:-build/wheelhouse}
PIP_CACHE=${PIP_CACHE_DIR_HOST:-build/pip-cache}
mkdir -p "$WHEELHOUSE" "$PIP_CACHE"

mounts=(-v "$PWD/pyproject.toml:/src/pyproject.toml:ro" -v "$PWD/$WHEELHOUSE:/wheelhouse"
        -v "$PWD/$PIP_CACHE:/root/.cache/pip")
# The build machine's CA bundle: a site behind a TLS-inspecting proxy trusts its own CA there.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
fi
"$CONTAINER" run --rm --network=host "${mounts[@]}" \
  -e PIP_DISABLE_PIP_VERSION_CHECK=1 -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
  "$BASE_IMAGE" sh -ec '
    python3 -c "import tomllib; print(\"\\n\".join(tomllib.load(open(\"/src/pyproject.toml\", \"rb\"))[\"project\"][\"dependencies\"]))" > /wheelhouse/requirements.txt
    python3 -m venv /tmp/venv
    # Offline first: when the wheels already there satisfy every requirement, no index is asked.
    /tmp/venv/bin/pip wheel --quiet --no-index --find-links /wheelhouse --wheel-dir /wheelhouse \
        -r /wheelhouse/requirements.txt 2>/dev/null \
      || /tmp/venv/bin/pip wheel --quiet --find-links /wheelhouse --wheel-dir /wheelhouse \
        -r /wheelhouse/requirements.txt
  '
echo "$WHEELHOUSE: $(ls "$WHEELHOUSE"/*.whl | wc -l) wheels for $BASE_IMAGE"
