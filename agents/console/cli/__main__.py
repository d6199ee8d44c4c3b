"""``python -m evobus.agents.console.cli ARGS``: ``evobus ARGS``."""

import sys

from evobus.agents.console.cli.main import main

sys.exit(main())
