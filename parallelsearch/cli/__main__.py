"""``python -m parallelsearch.cli``: the same command line as ``parallelsearch``."""

import sys

from parallelsearch.cli import main

sys.exit(main())
