"""Entry point: `python -m airvisor.demo <component> ...`."""

import sys

from airvisor.demo._cli import main

sys.exit(main())
