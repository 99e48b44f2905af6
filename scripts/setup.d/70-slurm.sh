#!/usr/bin/env bash
# A real Slurm cluster for tests/slurm (docs/slurm-test-cluster.md): Debian's slurmctld, slurmd,
# slurm-client and munge (Slurm 22.05), the image of the container nodes, and the cluster itself
# started by tests/slurm/_cluster.py (config, key and state under /opt/airvisor-test/slurm; the
# system's /etc/slurm and /etc/munge are not used). Idempotent: seconds when all is there.
# In CI the container nodes are required; elsewhere a machine without Docker gets the local node.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
need=()
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing ${need[*]}; installing them needs root (apt-get install ${need[*]})" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  echo "installed ${need[*]} ($((SECONDS - started)) s)"
fi
[ "$(id -u)" = 0 ] || { echo "the test cluster runs its daemons and jobs as root" >&2; exit 1; }
multi=yes
if ! scripts/start_dockerd.sh || ! tests/images/build_slurm_node_image.sh; then
  [ "${CI:-}" = "true" ] && exit 1
  echo "no Docker or no node image: the cluster gets the local node only" >&2
  multi=no
fi
if [ "$multi" = yes ]; then
  .venv/bin/python tests/slurm/_cluster.py up --require-multi
else
  .venv/bin/python tests/slurm/_cluster.py up --local-only
fi
echo "slurm test cluster up ($((SECONDS - started)) s)"
