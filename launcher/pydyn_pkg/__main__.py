"""`python -m pydyn`: the same as the `pydyn` command."""

import sys

from pydyn.launcher.cli import main

sys.exit(main())
