"""The tool generator: validates tools in the sandbox and keeps the versioned tool registry."""
