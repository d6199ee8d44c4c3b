"""The critic: structured diagnoses of candidates (REFLECT); it never writes code.

``rules`` is the offline engine's critic, pure functions from an evaluation's metrics.
"""
