#!/bin/sh
# The command of a container node of the test cluster (tests/slurm/_cluster.py starts it under
# Docker's --init, which reaps the processes jobs leave behind): munged with the cluster's key
# on the socket slurm.conf's AuthInfo names, then slurmd in the foreground, so the container
# ends when slurmd does. Paths come from the environment _cluster.py sets.
set -eu
: "${SLURM_CONF:?}" "${AIRVISOR_SLURM_DIR:?}" "${AIRVISOR_MUNGE_KEY:?}" "${AIRVISOR_MUNGE_SOCKET:?}" "${AIRVISOR_SLURM_LOG_DIR:?}"
node="$(hostname)"
socket_dir="$(dirname "$AIRVISOR_MUNGE_SOCKET")"
# The package's /var/lib/munge and /run/munge belong to its munge user; munged runs as root here
# (as on the controller machine) and insists on directories of its own user.
state=/run/airvisor-munge
# slurm.conf's SlurmdSpoolDir and SlurmdPidFile lie under the state directory, which only
# partly exists in the container (the bind mounts).
mkdir -p "$socket_dir" "$state" "$AIRVISOR_SLURM_DIR/spool" "$AIRVISOR_SLURM_DIR/run"
chmod 0755 "$socket_dir"  # munged refuses a socket in a directory others cannot traverse
# A container killed with `docker kill` and started again keeps its files: drop what the dead
# daemons left (their processes are gone with the old container's PID namespace).
rm -f "$AIRVISOR_MUNGE_SOCKET" "$AIRVISOR_MUNGE_SOCKET.lock" "$state/munged.pid"
munged --key-file="$AIRVISOR_MUNGE_KEY" --socket="$AIRVISOR_MUNGE_SOCKET" \
  --pid-file="$state/munged.pid" --seed-file="$state/munged.seed" \
  --log-file="$AIRVISOR_SLURM_LOG_DIR/munged-$node.log"
exec slurmd -D -f "$SLURM_CONF"
