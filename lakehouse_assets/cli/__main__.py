"""`python -m lakehouse_assets.cli`: the `lakehouse` command."""

import sys

from . import main

sys.exit(main())
