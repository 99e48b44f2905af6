#!/usr/bin/env bash
# Builds the image the air_mlgym tests run the REAL MLGym tasks in (no registry is reachable,
# so aigym/mlgym-agent cannot be pulled): a Debian bookworm minbase rootfs with what the tasks'
# evaluation scripts import, all from Debian's own packages and root-owned (python3, numpy,
# pandas, scikit-learn; flake8 for the edit check), and a user `agent` (uid 1000, home
# /home/agent). debootstrap uses its default mirror: the project names no mirror host.
# Usage: tests/images/build_mlgym_task_image.sh [TAG]   (idempotent: skips when TAG exists)
set -euo pipefail
tag="${1:-airvisor-test/mlgym-task:latest}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag already present"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
rootfs="$(mktemp -d /tmp/airvisor-mlgym-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
packages=python3,python3-numpy,python3-pandas,python3-sklearn,flake8,procps
if ! debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" >"$rootfs.log" 2>&1; then
  tail -n 30 "$rootfs.log" >&2
  rm -f "$rootfs.log"
  exit 1
fi
rm -f "$rootfs.log"
chroot "$rootfs" useradd --create-home --shell /bin/bash --uid 1000 agent
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import \
  --change 'CMD ["/bin/bash", "-l"]' \
  --change 'WORKDIR /home/agent' \
  - "$tag" >/dev/null
echo "built image $tag"
