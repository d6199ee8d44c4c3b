"""The orchestrator: the single writer of one campaign's state."""
