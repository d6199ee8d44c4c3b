"""What both ends of the registry's request-reply agree on: operations and error replies.

Kept apart from the service so that a client imports neither Qdrant nor git.
"""

from __future__ import annotations

from evobus.agents.registry_api.errors import (
    InvalidRequest,
    RegistryError,
    ResourceNotFound,
    VersionNotFound,
)
from evobus.schemas.registry import ErrorReply, RegistryRequest


def operation(request: RegistryRequest) -> str:
    """A request's operation: its tag, the last token of the subject it travels on."""
    return str(type(request).__struct_config__.tag)


def error_reply(exc: RegistryError) -> ErrorReply:
    """The reply that carries ``exc`` to the client (which raises it again, typed)."""
    match exc:
        case VersionNotFound():
            return ErrorReply(
                code=exc.code,
                message=exc.message,
                kind=exc.kind,
                name=exc.name,
                version=exc.version,
            )
        case ResourceNotFound():
            return ErrorReply(code=exc.code, message=exc.message, kind=exc.kind, name=exc.name)
        case _:
            return ErrorReply(code=exc.code, message=exc.message)


def error_from_reply(reply: ErrorReply) -> RegistryError:
    """The typed error an ``ErrorReply`` stands for."""
    match reply.code:
        case "resource_not_found":
            return ResourceNotFound(reply.kind, reply.name)
        case "version_not_found":
            return VersionNotFound(reply.kind, reply.name, reply.version)
        case "invalid_request":
            return InvalidRequest(reply.message)
        case code:
            return RegistryError(code, reply.message)
