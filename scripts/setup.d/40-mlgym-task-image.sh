#!/usr/bin/env bash
# The image the air_mlgym tests run the real MLGym tasks in (python3, numpy, pandas,
# scikit-learn from Debian's packages, user agent); needs the Docker engine of 10-docker.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec tests/images/build_mlgym_task_image.sh
