"""The registry: AGP's context manager behind a NATS request-reply interface.

``service.Registry`` combines the Qdrant store, the git library and an embedder;
``agent.run_registry`` is the process; ``evobus.agents.registry_api`` is how other agents
call it.
"""
