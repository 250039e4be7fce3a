"""`python -m monitors ...` from the pack folder: see monitors/cli.py."""

import sys

from .cli import main

sys.exit(main())
