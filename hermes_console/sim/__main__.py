import sys

from hermes_console.sim.cli import main

sys.exit(main())
