"""`python -m simworld` runs the `simworld` command."""

import sys

from simworld.cli import main

sys.exit(main())
