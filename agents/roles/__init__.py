"""The role processes: orchestrator, critic, actor, tool generator, evaluator, registry."""
