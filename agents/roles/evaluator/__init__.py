"""The evaluator: runs candidates on task instances inside the sandbox."""
