"""The ``evobus`` command line: one module per command, each with its ``add_parser`` and its
``command``; ``main`` (main.py) parses and runs them. ``evobus agent`` is the runner's
(agent_command.py), since the supervisor starts agents without the rest of the command line."""

from evobus.agents.console.cli.main import DISTRIBUTION, build_parser, installed_version, main
from evobus.agents.runner.agent_command import default_max_concurrency
from evobus.agents.runner.exits import EXIT_CONFIG, EXIT_FAILED, EXIT_TERMINATED

__all__ = [
    "DISTRIBUTION",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_TERMINATED",
    "build_parser",
    "default_max_concurrency",
    "installed_version",
    "main",
]
