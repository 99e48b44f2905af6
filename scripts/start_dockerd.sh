#!/usr/bin/env bash
# Starts a Docker engine when none answers (as root), and waits for it.
set -euo pipefail
if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "no Docker engine answers and this is not root: start dockerd yourself" >&2
  exit 1
fi
mkdir -p /var/log
nohup dockerd >/var/log/airvisor-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "dockerd is up"
    exit 0
  fi
  sleep 1
done
echo "dockerd did not come up in 60 s; see /var/log/airvisor-dockerd.log" >&2
tail -20 /var/log/airvisor-dockerd.log >&2 || true
exit 1
