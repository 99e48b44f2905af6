#!/usr/bin/env bash
# Builds an image laid out like MLGym's official `aigym/mlgym-agent` (dockerfiles/mlgym.dockerfile
# of the MLGym checkout), from Debian's own packages only (no registry but Debian's is reachable,
# so neither ubuntu:jammy nor Miniconda can be used):
# - a user `agent` of a system group `mlgym` (`useradd -r`: a uid below 1000, as upstream),
#   home /home/agent, ROOT=/home/agent/, PS1="> ";
# - NO Python outside /home/agent: Debian's python3 and the task packages (numpy, pandas,
#   scikit-learn, flake8) are moved into a conda-like environment OWNED BY agent at
#   /home/agent/miniconda3/envs/mlgym_generic (Python finds its prefix from the executable's
#   place, so the moved interpreter works there), and the system copy is deleted;
# - `conda`: a small shell function in miniconda3/etc/profile.d/conda.sh (`conda activate NAME`,
#   `conda deactivate`), which MLGym's bashrc sources when there is no conda binary;
# - MLGym's own bashrc (dockerfiles/custom_bashrc) and its PATH order: /home/agent/.local/bin and
#   /home/agent/miniconda3/bin first, both writable by the agent;
# - MLGym's sudoers line: agent may run apt-get and apt as root without a password.
# debootstrap uses its default mirror: the project names no mirror host.
# Usage: tests/images/build_mlgym_official_image.sh [TAG]   (idempotent: skips when TAG exists)
#   MLGYM_CHECKOUT: the MLGym checkout (default ../shared/third_party/MLGym next to the repository)
set -euo pipefail
tag="${1:-airvisor-test/mlgym-official:latest}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag already present"
  exit 0
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
checkout="${MLGYM_CHECKOUT:-$here/../../../shared/third_party/MLGym}"
bashrc="$checkout/dockerfiles/custom_bashrc"
[ -f "$bashrc" ] || { echo "no MLGym checkout with dockerfiles/custom_bashrc at $checkout (set MLGYM_CHECKOUT)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
rootfs="$(mktemp -d /tmp/airvisor-mlgym-official.XXXXXX)"
trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
# upstream: bash gcc git jq wget g++ make file sudo (compilers left out: no task here needs them)
packages=sudo,procps,file,jq,python3,python3-numpy,python3-pandas,python3-sklearn,flake8
# AIRVISOR_IMAGE_CACHE (optional): a directory keeping the debootstrap result between builds
cached="${AIRVISOR_IMAGE_CACHE:+$AIRVISOR_IMAGE_CACHE/mlgym-official-debootstrap.tar}"
if [ -n "$cached" ] && [ -f "$cached" ]; then
  tar -C "$rootfs" -xf "$cached"
else
  if ! debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" >"$rootfs.log" 2>&1; then
    tail -n 30 "$rootfs.log" >&2
    exit 1
  fi
  if [ -n "$cached" ]; then
    mkdir -p "$AIRVISOR_IMAGE_CACHE" && tar -C "$rootfs" -cf "$cached.tmp" . && mv "$cached.tmp" "$cached"
  fi
fi
cp "$bashrc" "$rootfs/tmp/custom_bashrc"
chroot "$rootfs" /bin/bash -euo pipefail -c '
groupadd -r mlgym
useradd -r -g mlgym -m -d /home/agent -s /bin/bash agent
echo "agent ALL=(ALL) NOPASSWD: /usr/bin/apt-get, /usr/bin/apt" >> /etc/sudoers.d/agent
chmod 440 /etc/sudoers.d/agent
install -m 0644 /tmp/custom_bashrc /home/agent/.bashrc && rm /tmp/custom_bashrc
# Ubuntu'"'"'s /etc/profile keeps the image'"'"'s PATH (agent directories first) in login shells;
# Debian'"'"'s resets it: drop that block, as on the official image.
sed -i "/^if \[ \"\$(id -u)\" -eq 0 \]; then\$/,/^export PATH\$/d" /etc/profile
grep -q "^export PATH" /etc/profile && { echo "cannot drop the PATH block of /etc/profile" >&2; exit 1; }

conda=/home/agent/miniconda3
env=$conda/envs/mlgym_generic
mkdir -p "$env/bin" "$env/lib/python3" "$conda/bin" "$conda/etc/profile.d" /home/agent/.conda
cp -a /usr/bin/python3.11 "$env/bin/python3.11"
ln -s python3.11 "$env/bin/python3"
ln -s python3.11 "$env/bin/python"
cp -a /usr/lib/python3.11 "$env/lib/python3.11"
cp -a /usr/lib/python3/dist-packages "$env/lib/python3/dist-packages"
for tool in flake8 pyflakes3 pycodestyle; do
  [ -f "/usr/bin/$tool" ] || continue
  { echo "#!$env/bin/python3"; tail -n +2 "/usr/bin/$tool"; } > "$env/bin/$tool"
  chmod 0755 "$env/bin/$tool"
done
ln -s ../envs/mlgym_generic/bin/python3.11 "$conda/bin/python3"
ln -s python3 "$conda/bin/python"
cat > "$conda/etc/profile.d/conda.sh" <<"EOF"
# A conda stand-in for the test image: `conda activate NAME` / `conda deactivate`.
conda() {
  case "$1" in
    activate)
      local prefix="/home/agent/miniconda3/envs/${2:-base}"
      [ "${2:-base}" = base ] && prefix=/home/agent/miniconda3
      [ -d "$prefix" ] || { echo "conda: no environment ${2:-base}" >&2; return 1; }
      [ -n "${CONDA_PREFIX:-}" ] && PATH="${PATH#"$CONDA_PREFIX/bin:"}"
      export CONDA_PREFIX="$prefix" CONDA_DEFAULT_ENV="${2:-base}" PATH="$prefix/bin:$PATH" ;;
    deactivate)
      [ -n "${CONDA_PREFIX:-}" ] && PATH="${PATH#"$CONDA_PREFIX/bin:"}"
      unset CONDA_PREFIX CONDA_DEFAULT_ENV ;;
    *) echo "conda (test image stand-in): only activate and deactivate" >&2; return 1 ;;
  esac
}
EOF
chown -R agent:mlgym /home/agent

# No Python outside /home/agent: the system copy goes (dpkg still lists the packages).
rm -rf /usr/lib/python3 /usr/lib/python3.11 /usr/local/lib/python3* /usr/share/python3 \
  /usr/bin/python3* /usr/bin/py3* /usr/bin/pydoc3* /usr/bin/pygettext3* /usr/bin/f2py* \
  /usr/bin/flake8 /usr/bin/pyflakes3 /usr/bin/pycodestyle /usr/lib/x86_64-linux-gnu/libpython3* \
  /usr/src/python3* /usr/include/python3* /usr/share/binfmts/python3* \
  /usr/lib/binfmt.d/python3*
rm -rf /var/cache/apt/archives/*.deb /var/lib/apt/lists/*
'
# what would be a Python: an interpreter in a bin directory, a library directory, libpython
left="$(cd "$rootfs" && find usr/bin usr/sbin usr/local/bin usr/local/sbin usr/lib usr/local/lib \
  -maxdepth 2 \( \( -name 'python[0-9]*' \( -type d -o -type l -o -perm /111 \) \) \
  -o -name 'libpython*.so*' \) -print -quit)"
if [ -n "$left" ]; then
  echo "a Python outside /home/agent is left in the image: $left" >&2
  exit 1
fi
path=/home/agent/.local/bin:/home/agent/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
tar -C "$rootfs" -c . | docker import \
  --change "ENV PATH=$path" \
  --change "ENV ROOT=/home/agent/" \
  --change 'ENV PS1="> "' \
  --change 'USER agent' \
  --change 'WORKDIR /home/agent' \
  --change 'CMD ["/bin/bash"]' \
  - "$tag" >/dev/null
echo "built image $tag"
