"""``python -m hermes_console`` == ``hermes-console``."""

import sys

from hermes_console.cli import main

sys.exit(main())
