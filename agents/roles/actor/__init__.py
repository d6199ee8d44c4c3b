"""The actor: proposes child artifacts (SELECT + IMPROVE), one operator per proposal.

``mutation`` is the offline engine's proposer, pure functions over source text and a seed.
"""
