#!/usr/bin/env bash
# An image laid out like MLGym's official aigym/mlgym-agent (user agent, no Python outside
# /home/agent, an agent-owned conda-like env, MLGym's bashrc, PATH order and sudoers line), built
# from Debian's packages: the air_mlgym tests run the real tasks on it as well. Needs the Docker
# engine of 10-docker.sh and the MLGym checkout (../shared/third_party/MLGym or $MLGYM_CHECKOUT).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec tests/images/build_mlgym_official_image.sh
