#!/usr/bin/env bash
# Builds the image of the test cluster's container nodes (tests/slurm/_cluster.py): a Debian
# bookworm minbase rootfs with Debian's slurmd, slurm-client (srun inside jobs) and munge, the
# same packages and version as on the controller machine, plus python3 and the shared libraries
# a pyenv-built CPython needs (the nodes run the checkout's venv, bind-mounted read-only at the
# same path; see docs/slurm-test-cluster.md), and the tools prime-rl's sbatch templates call on
# a node besides bash and pkill (ip, hostname -I, curl). No daemon starts here: the container's
# command, scripts/slurm/node-entrypoint.sh from the checkout, starts munged and slurmd.
# Older tags of this image that no container uses are removed after a build.
# The tag carries a hash of this script, so a change of packages builds a new image.
# Usage: tests/images/build_slurm_node_image.sh [--print-tag]   (idempotent: skips when present)
set -euo pipefail
cd "$(dirname "$0")/../.."
hash="$(sha256sum tests/images/build_slurm_node_image.sh | cut -c1-12)"
tag="airvisor-test/slurm-node:$hash"
if [ "${1:-}" = "--print-tag" ]; then
  echo "$tag"
  exit 0
fi
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag already present"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
rootfs="$(mktemp -d /tmp/airvisor-slurm-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
chmod 0755 "$rootfs"  # mktemp's 0700 would be the image's /: package scripts that drop root fail
# Libraries: what python3.11 and its lib-dynload modules link (ssl, ctypes, sqlite3, lzma, bz2,
# readline, curses, uuid, dbm, nis), so a venv made from a pyenv build runs on the node.
packages=(
  slurmd slurm-client munge python3 procps iproute2 curl
  libssl3 libffi8 libsqlite3-0 libbz2-1.0 liblzma5 zlib1g libreadline8 libncursesw6
  libuuid1 libgdbm6 libgdbm-compat4 libnsl2 libtirpc3 libexpat1
)
include="$(IFS=,; echo "${packages[*]}")"
if ! debootstrap --variant=minbase --include="$include" bookworm "$rootfs" >/dev/null; then  # the default mirror
  tail -30 "$rootfs/debootstrap/debootstrap.log" >&2 || true
  exit 1
fi
# The packages' own configuration stays unused: the cluster's slurm.conf and munge key are
# bind-mounted from the controller machine's state directory.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import \
  --change 'CMD ["/bin/sh"]' \
  --change 'ENV container=docker' \
  - "$tag" >/dev/null
echo "built image $tag"
for old in $(docker image ls --format '{{.Repository}}:{{.Tag}}' airvisor-test/slurm-node); do
  [ "$old" = "$tag" ] || docker image rm "$old" >/dev/null 2>&1 || true
done
