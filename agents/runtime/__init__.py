"""The agent runtime every role shares: the process, work items, model clients, the event log."""
