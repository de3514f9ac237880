"""`python -m xrpo_verl.lab demo|train|build|pack`: see `cli.py`."""

import sys

from xrpo_verl.lab.cli import main

sys.exit(main())
