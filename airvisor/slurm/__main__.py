"""`python -m airvisor.slurm node-check ...`: the per-node step of a Slurm-mode job."""

import sys

from airvisor.slurm._node_check import main

sys.exit(main())
