"""The ``evobus`` console script: the command line, with a head start for the commands that
start agents.

``evobus run`` and ``evobus resume`` start six agent processes forked from one fork server that
imports every role's modules once (agents/runner/launcher.py): about a second of CPU, on the
way to the first evaluation. Started here, before this process imports the command line (a
quarter of a second), the two imports overlap. Every other command goes straight on.
"""

from __future__ import annotations

import sys

STARTS_AGENTS = frozenset({"run", "resume"})
"""The commands that launch agents, whose fork server is worth starting first."""


def main() -> int:
    """Entry point of the ``evobus`` console script."""
    if sys.argv[1:2] and sys.argv[1] in STARTS_AGENTS:
        from evobus.agents.runner import launcher

        launcher.warm_up()
    from evobus.agents.console.cli.main import main as command_line

    return command_line()
