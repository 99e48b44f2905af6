#!/usr/bin/env bash
# Builds the image the systemd scenario tests (tests/service) boot with /sbin/init under Docker:
# a Debian bookworm minbase rootfs with systemd, python3 and python3-venv, plus a wheelhouse of
# airvisor's dependencies at /opt/wheelhouse (the container has no network: the tests install
# the checkout from it, as the README says: a venv and `pip install`).
# The tag carries a hash of pyproject.toml, so a change of dependencies builds a new image.
# Usage: tests/images/build_systemd_image.sh [--print-tag]   (idempotent: skips when present)
set -euo pipefail
cd "$(dirname "$0")/../.."
hash="$(sha256sum pyproject.toml tests/images/build_systemd_image.sh | sha256sum | cut -c1-12)"
tag="airvisor-test/systemd:$hash"
if [ "${1:-}" = "--print-tag" ]; then
  echo "$tag"
  exit 0
fi
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag already present"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || { echo "no $python: run scripts/bootstrap.sh first" >&2; exit 1; }
rootfs="$(mktemp -d /tmp/airvisor-systemd-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=systemd,systemd-sysv,python3,python3-venv,procps \
  bookworm "$rootfs" >/dev/null  # the default mirror
# Units that make no sense in a container (and would only slow the boot or fail).
for unit in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
    systemd-firstboot.service systemd-remount-fs.service sys-kernel-debug.mount \
    sys-kernel-tracing.mount systemd-logind.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
echo "airvisor-test" >"$rootfs/etc/hostname"
# Dependencies only (airvisor itself is installed by the tests from the checkout under test),
# plus setuptools, the build backend pip needs for the checkout.
"$python" -m pip wheel --quiet --quiet --wheel-dir "$rootfs/opt/wheelhouse" . "setuptools>=68" wheel
rm -f "$rootfs"/opt/wheelhouse/airvisor-*.whl
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import \
  --change 'CMD ["/sbin/init"]' \
  --change 'ENV container=docker' \
  - "$tag" >/dev/null
echo "built image $tag"
