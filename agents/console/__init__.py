"""The operator's console: the command line (cli/), the live page (ui/), the offline report,
the benches, the trace view and llm-sim's offline answers. It sits on the runner and the Python
API; nothing imports it."""
