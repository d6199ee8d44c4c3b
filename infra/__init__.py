"""Adapters to the outside world: nats-server, sandbox, git workspace, (later) Qdrant and LLMs."""
