"""The operator's console: the CLI, the supervisor, the views, the report and the benches."""
