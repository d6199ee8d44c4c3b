"""The registry as the other processes see it: ``client.RegistryClient`` (typed calls over NATS
request-reply), the wire protocol both ends agree on, and the typed errors. It imports no
Qdrant and no git, and sits under every role, the prompt book and the runtime; the service
itself is ``evobus.agents.roles.registry``."""
