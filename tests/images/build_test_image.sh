#!/usr/bin/env bash
# Builds the small local image the Docker tests use in place of aigym/mlgym-agent
# (no registry is reachable here): a Debian minbase rootfs with bash and python3,
# a user `agent` with home /home/agent, imported with `docker import`.
# Usage: tests/images/build_test_image.sh [TAG]   (idempotent: skips when TAG exists)
set -euo pipefail
tag="${1:-airvisor-test/mlgym:latest}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag already present"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
rootfs="$(mktemp -d /tmp/airvisor-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,procps bookworm "$rootfs" >/dev/null
chroot "$rootfs" useradd --create-home --shell /bin/bash --uid 1000 agent
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import \
  --change 'CMD ["/bin/bash", "-l"]' \
  --change 'WORKDIR /home/agent' \
  - "$tag" >/dev/null
echo "built image $tag"
