"""The simulator's request log: one JSON line per chat completion it answered.

Each line has the request's number, the model and the answer type asked for (the JSON schema's
name, else ``text`` or ``json_object``), the messages as the answerer read them, every choice's
text and the token counts the response reported, so that a test or a benchmark can see what was
asked and what the simulator said (``evobus llm-sim --request-log FILE``). Every line says it
comes from the simulator.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

from evobus.infra.llm_sim.answers import SIMULATOR_NAME, ChatRequest

_encoder = msgspec.json.Encoder()


class RequestLogLine(msgspec.Struct, frozen=True, kw_only=True):
    """One answered chat completion, as the log holds it.

    Attributes:
        request: the server's number of the request (from 0).
        at: when it was answered (epoch seconds).
        model, schema, n: what the client asked for.
        messages: each message's role and text, images counted.
        answers: the text of every choice, as sent.
        prompt_tokens: the prompt's tokens, as the response's ``usage`` reported them.
        completion_tokens: each choice's tokens, as the time model drew them.
        simulator: that the answers came from the simulator, not a language model.
    """

    request: int
    at: float
    model: str
    schema: str
    n: int
    messages: list[dict[str, str | int]]
    answers: list[str]
    prompt_tokens: int
    completion_tokens: list[int]
    simulator: str = f"{SIMULATOR_NAME} (a simulator, not a language model)"


class RequestLog:
    """Appends a ``RequestLogLine`` per answered request to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(
        self,
        number: int,
        request: ChatRequest,
        answers: Sequence[str],
        prompt_tokens: int,
        completion_tokens: Sequence[int],
    ) -> None:
        """Append one line (a single small write; the file is opened for each)."""
        line = RequestLogLine(
            request=number,
            at=round(time.time(), 3),
            model=request.model,
            schema=request.schema_name or request.response_type,
            n=request.n,
            messages=[
                {"role": m.role, "text": m.text, "images": m.images} for m in request.messages
            ],
            answers=list(answers),
            prompt_tokens=prompt_tokens,
            completion_tokens=list(completion_tokens),
        )
        with self.path.open("ab") as log:
            log.write(_encoder.encode(line) + b"\n")


def read_request_log(path: Path) -> list[RequestLogLine]:
    """The lines of a request log, in order."""
    decoder = msgspec.json.Decoder(RequestLogLine)
    return [decoder.decode(line) for line in path.read_bytes().splitlines() if line.strip()]
