"""Errors of the registry, on both sides of the bus: the client raises them from error replies."""

from __future__ import annotations


class RegistryError(Exception):
    """Root of the registry's errors.

    Attributes:
        code: the error code carried by ``ErrorReply`` (``internal``, ``store_failed``, …).
        message: what went wrong, in words.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class ResourceNotFound(RegistryError):
    """No resource of this kind and name was ever registered.

    Attributes:
        kind: the resource kind asked for.
        name: the resource name asked for.
    """

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__("resource_not_found", f"no {kind} named {name!r} is registered")


class VersionNotFound(RegistryError):
    """The resource exists, but not in this version.

    Attributes:
        kind: the resource kind.
        name: the resource name.
        version: the version asked for.
    """

    def __init__(self, kind: str, name: str, version: int) -> None:
        self.kind = kind
        self.name = name
        self.version = version
        super().__init__("version_not_found", f"{kind} {name!r} has no version {version}")


class InvalidRequest(RegistryError):
    """The request cannot be served as asked (undecodable, a bad name, a bad argument)."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_request", message)


class RegistryUnavailable(RegistryError):
    """No registry process answered in time (client side only)."""

    def __init__(self, message: str) -> None:
        super().__init__("unavailable", message)


class InvalidSetting(RegistryError):
    """A registry setting has a value it cannot take (raised when the registry opens).

    Attributes:
        variable: the environment variable that holds it.
    """

    def __init__(self, variable: str, message: str) -> None:
        self.variable = variable
        super().__init__("invalid_setting", f"{variable}: {message}")
