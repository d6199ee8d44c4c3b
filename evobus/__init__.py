"""evobus: LLM-driven evolution of programs, prompts, tools and skills on a NATS JetStream bus."""
