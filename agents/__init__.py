"""The five evobus agents, their shared runtime, the supervisor, the CLI and the built-in tasks."""
