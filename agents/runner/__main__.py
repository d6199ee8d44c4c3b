"""``python -m evobus.agents.runner agent ROLE …``: one agent process, as the supervisor starts
it (agent_command.py), without the command line's other commands."""

import sys

from evobus.agents.runner.agent_command import main

sys.exit(main())
