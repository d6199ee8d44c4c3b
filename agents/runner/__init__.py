"""What starts and follows a campaign: the supervisor, the agents' launcher and restarts, the
embedded bus, islands, the follow loop and its progress lines. Both the Python API (``evobus``)
and the command line (``evobus.agents.console.cli``) sit on it; it imports neither."""
