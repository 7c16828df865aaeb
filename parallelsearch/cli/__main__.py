"""``python -m parallelsearch.cli``: the console script's ``main`` (tests and child processes
start the command line this way, with the interpreter that runs them)."""

import sys

from parallelsearch.cli import main

sys.exit(main())
