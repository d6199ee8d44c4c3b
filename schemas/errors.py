"""Errors raised while loading or validating schema data."""

from __future__ import annotations


class SchemaError(Exception):
    """Root of the errors of the schemas package."""


class CampaignConfigError(SchemaError):
    """A campaign file is unreadable or has a bad key or value.

    Attributes:
        path: the file that failed to load.
        key: the dotted key at fault (``strategy.in_flight``), or ``""`` for the whole file.
        reason: what is wrong with it.
    """

    def __init__(self, path: str, key: str, reason: str) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        where = f"key '{key}'" if key else "file"
        super().__init__(f"{path}: {where}: {reason}")
