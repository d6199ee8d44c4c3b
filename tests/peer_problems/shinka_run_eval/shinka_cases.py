"""The evaluator's cases, in a module beside it (as ShinkaEvolve's examples keep a data
generator beside ``evaluate.py``): it travels with the evaluator into the sandbox."""

CASES = ((1.0, 3), (2.0, 4), (-1.5, 2))
