"""Chat messages in the OpenAI shape, images included as data-URL content parts."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, TypeAlias

ChatMessage: TypeAlias = dict[str, Any]
"""One message of a chat completion request: ``role`` and ``content`` (a string or parts)."""

_JPEG_MAGIC = b"\xff\xd8\xff"


def text_message(role: str, text: str) -> ChatMessage:
    """A message of plain text from ``role`` ("system", "user" or "assistant")."""
    return {"role": role, "content": text}


def user_message(text: str, images: Sequence[bytes] = ()) -> ChatMessage:
    """A user message: plain text, or a text part followed by one ``image_url`` part per image.

    Without images the content stays a plain string, which text-only chat templates require.
    Images are PNG (the behavioural-evidence plots) unless they start with the JPEG marker.
    """
    if not images:
        return text_message("user", text)
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts.extend(
        {"type": "image_url", "image_url": {"url": image_data_url(image)}} for image in images
    )
    return {"role": "user", "content": parts}


def image_data_url(image: bytes) -> str:
    """``data:image/png;base64,…`` (or ``image/jpeg``) for the bytes of one image."""
    mime = "image/jpeg" if image.startswith(_JPEG_MAGIC) else "image/png"
    return f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"
