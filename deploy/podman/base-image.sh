#!/usr/bin/env bash
# Builds localhost/memoryhub-base:bookworm from Debian packages alone (debootstrap), for machines
# that reach deb.debian.org but no image registry. It stands in for python:3.11-slim-bookworm as
# the Dockerfile's BASE_IMAGE: Debian's python3 is 3.11 too, at /usr/bin/python3.
# Usage: deploy/podman/base-image.sh [TAG]   (env: DEBIAN_MIRROR, BASE_ROOTFS_CACHE)
set -euo pipefail
cd "$(dirname "$0")/../.."
TAG=${1:-localhost/memoryhub-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The packages debootstrap fetches are kept here, so a rebuild does not download them again.
CACHE=${BASE_ROOTFS_CACHE:-/var/tmp/memoryhub-debootstrap-cache}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}

if podman image exists "$TAG"; then
  echo "base image $TAG exists (podman rmi it to rebuild)"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; exit 1; }

mkdir -p "$CACHE"
rootfs=$(mktemp -d /var/tmp/memoryhub-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
# minbase: apt and the essentials only; python3-venv brings ensurepip's pip for the builder stage.
debootstrap --variant=minbase --cache-dir="$CACHE" \
  --include=python3,python3-venv,ca-certificates,tzdata \
  bookworm "$rootfs" "$MIRROR"
# What an image does not need: apt's lists and caches, docs and man pages (each package's
# copyright file stays: the licences the image carries).
chroot "$rootfs" apt-get clean
find "$rootfs"/usr/share/doc -type f ! -name copyright -delete
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/man/* \
  "$rootfs"/usr/share/info/* "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old
tar -C "$rootfs" -c . | podman import \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$TAG"
echo "built $TAG"
