"""`python -m monitors ...` from the pack folder: see monitors/cli/commands.py."""

import sys

from .cli.commands import main

sys.exit(main())
