"""Evidence images for the page, from the bus's object store (EVO_EVIDENCE), where evaluators
put them (roles/evaluator ``evidence_name``: ``<campaign>/<candidate>/<work id>.png``).

A page without a bus, or logged in as a user that may not read the store (the ``viewer``),
has none; :attr:`EvidenceImages.note` says which.
"""

from __future__ import annotations

import anyio
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from evobus.bus import subjects

# A bus that does not answer an object-store call in this long will not (a JetStream call the
# user may not make is never answered at all).
EVIDENCE_SECONDS = 3.0
NO_BUS = (
    "evidence images are kept in the bus's object store (EVO_EVIDENCE): this page reads no bus "
    "(give --nats URL, or start a finished run's embedded server with `evobus serve --out DIR`)"
)
NONE_DRAWN = (
    "no evidence image for these evaluations (a task draws one when a critic with "
    "llm.critic_vision is to look at it)"
)


class NoImage(Exception):
    """No image to serve; ``status`` is the HTTP answer's (404: none, 502: the bus failed)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def object_name(campaign: str, candidate: str, work: str) -> str:
    """The object name the evaluator gives an evaluation's image."""
    return f"{campaign}/{candidate}/{work}.png"


def image_path(campaign: str, candidate: str, work: str) -> str:
    """Where the page serves that image."""
    return f"/api/campaigns/{campaign}/evidence/{candidate}/{work}.png"


class EvidenceImages:
    """The evidence store of one bus (``js``; None: no bus), opened on first use."""

    def __init__(self, js: JetStreamContext | None) -> None:
        self.js = js
        self.note = "" if js is not None else NO_BUS
        self._store: ObjectStore | None = None

    async def store(self) -> ObjectStore | None:
        """The store, or None (:attr:`note` says why)."""
        if self._store is not None or self.js is None:
            return self._store
        try:
            with anyio.fail_after(EVIDENCE_SECONDS):
                self._store = await self.js.object_store(subjects.OBJ_EVIDENCE)
        except BucketNotFoundError:
            self.note = "the bus has no evidence store yet (no image was drawn)"
        except (NatsError, TimeoutError) as exc:
            self.note = (
                "this NATS user may not read the evidence store (the viewer user reads events "
                f"only; {type(exc).__name__})"
            )
        return self._store

    async def paths(
        self, campaign: str, candidate: str, works: list[str]
    ) -> tuple[dict[str, str], str]:
        """Where each evaluation's image is served, by work id (those that drew one), and a
        note when none is (why)."""
        store = await self.store()
        if store is None:
            return {}, self.note
        found: dict[str, str] = {}
        for work in works:
            try:
                with anyio.fail_after(EVIDENCE_SECONDS):
                    await store.get_info(object_name(campaign, candidate, work))
            except (NatsError, TimeoutError):
                continue  # ObjectNotFoundError among them: this evaluation drew none
            found[work] = image_path(campaign, candidate, work)
        return found, "" if found else NONE_DRAWN

    async def image(self, campaign: str, candidate: str, work: str) -> bytes:
        """One image's PNG.

        Raises:
            NoImage: there is none, or the bus did not answer.
        """
        store = await self.store()
        if store is None:
            raise NoImage(404, self.note)
        try:
            with anyio.fail_after(EVIDENCE_SECONDS):
                found = await store.get(object_name(campaign, candidate, work))
        except ObjectNotFoundError:
            raise NoImage(404, "no such evidence image") from None
        except (NatsError, TimeoutError) as exc:
            raise NoImage(502, f"the evidence store did not answer: {exc}") from None
        return found.data or b""
