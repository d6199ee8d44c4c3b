"""A resource's lifecycle as pure transitions: latest version in, next version and message out.

Each function has the shape of ``infra.library.Change`` once its arguments are bound: it gets the
latest version (None for a resource never registered) and returns the next version with its
commit message, or None when nothing changes (so a retried request never mints a second
version). Versions count up from 1 (AGP's version manager: one immutable snapshot per version).
"""

from __future__ import annotations

import math

import msgspec

from evobus.agents.evolution.skills import update_utility
from evobus.agents.registry_api.errors import InvalidRequest, ResourceNotFound
from evobus.agents.roles.registry.contracts import generate_contract
from evobus.schemas.registry import RegisterRequest, Resource, ResourceChanges

Next = tuple[Resource, str] | None

SKILL_BOOKKEEPING = ("utility", "uses")
"""A skill's params that only ``skill_use`` changes once the skill exists (REFLEX §3.4)."""

RECENT_USES = "recent_uses"
"""The metadata key of a skill's last ``RECENT_USES_KEPT`` use ids, space-separated: what makes
a repeated ``skill_use`` a no-op."""
RECENT_USES_KEPT = 256


def same_content(a: Resource, b: Resource) -> bool:
    """Whether two versions hold the same record apart from version number and time."""
    return msgspec.structs.replace(a, version=0, updated_at=0.0) == msgspec.structs.replace(
        b, version=0, updated_at=0.0
    )


def _next_version(current: Resource | None) -> int:
    return current.version + 1 if current is not None else 1


def _label(resource: Resource) -> str:
    return f"{resource.kind}/{resource.name} v{resource.version}"


def register(current: Resource | None, request: RegisterRequest, now: float) -> Next:
    """Version 1 of a new resource, or the next version of an existing one that differs.

    Registering a retired resource again brings it back to life. A skill's ``utility`` and
    ``uses`` belong to the registry once it exists (``skill_use`` keeps them): registering the
    same skill again (an actor extracting the same snippet twice) keeps them, not resets them.
    """
    params = request.params
    metadata = request.metadata
    if current is not None and request.kind == "skill":
        kept = {k: current.params[k] for k in SKILL_BOOKKEEPING if k in current.params}
        params = {**params, **kept}
        if RECENT_USES in current.metadata:
            metadata = {**metadata, RECENT_USES: current.metadata[RECENT_USES]}
    draft = Resource(
        name=request.name,
        kind=request.kind,
        version=_next_version(current),
        description=request.description,
        source=request.source,
        params=params,
        trainable=request.trainable,
        metadata=metadata,
        updated_at=now,
    )
    new = msgspec.structs.replace(draft, contract=request.contract or generate_contract(draft))
    if current is not None and same_content(current, new):
        return None
    return new, f"register {_label(new)}"


def update(
    current: Resource | None, changes: ResourceChanges, now: float, *, kind: str, name: str
) -> Next:
    """The next version with ``changes`` applied; None when they change nothing.

    A contract that was generated follows the new source and description; one given by the
    caller stays until the caller changes it.

    Raises:
        ResourceNotFound: no such resource.
        InvalidRequest: the resource is retired (restore or register it again first).
    """
    if current is None:
        raise ResourceNotFound(kind, name)
    if current.retired:
        raise InvalidRequest(f"{kind} {name!r} is retired: restore or register it again")
    fields = {
        field: value
        for field in ("description", "source", "params", "trainable", "metadata")
        if (value := getattr(changes, field)) is not None
    }
    new = msgspec.structs.replace(current, **fields, version=current.version + 1, updated_at=now)
    if changes.contract is not None:
        new = msgspec.structs.replace(new, contract=changes.contract)
    elif current.contract == generate_contract(current):
        new = msgspec.structs.replace(new, contract=generate_contract(new))
    if same_content(current, new):
        return None
    return new, f"update {_label(new)} ({', '.join(sorted(fields) or ['contract'])})"


def restore(current: Resource | None, old: Resource, now: float) -> Next:
    """``old`` again, as the next version (active, whatever ``current`` was)."""
    if current is not None and same_content(current, old):
        return None
    new = msgspec.structs.replace(
        old, version=_next_version(current), retired=False, updated_at=now
    )
    return new, f"restore {_label(old)} as v{new.version}"


def retire(current: Resource | None, now: float, *, kind: str, name: str) -> Next:
    """The next version, retired; None when it already is.

    Raises:
        ResourceNotFound: no such resource.
    """
    if current is None:
        raise ResourceNotFound(kind, name)
    if current.retired:
        return None
    new = msgspec.structs.replace(
        current, version=current.version + 1, retired=True, updated_at=now
    )
    return new, f"retire {_label(new)}"


def _number(params: dict[str, int | float | str | bool], key: str, default: float) -> float:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"skill param {key!r} is {value!r}, not a number")
    return float(value)


def skill_use(
    current: Resource | None,
    delta: float,
    delta_max: float,
    now: float,
    *,
    name: str,
    use_id: str = "",
) -> Next:
    """The next version of a skill with its utility credited for one use (REFLEX §3.4).

    The rule is ``agents.evolution.skills.update_utility``: the fitness delta clipped to
    [0, Δmax] and divided by Δmax is added to ``utility``; ``uses`` counts the uses. A use whose
    ``use_id`` is among the skill's recent ones was credited already: nothing changes.

    Raises:
        ResourceNotFound: no such skill.
        InvalidRequest: Δ or Δmax is not a finite number, Δmax ≤ 0, or the skill is retired.
    """
    if current is None:
        raise ResourceNotFound("skill", name)
    if not (math.isfinite(delta) and math.isfinite(delta_max)) or delta_max <= 0:
        raise InvalidRequest(f"skill use needs finite Δ and Δmax > 0, got {delta}, {delta_max}")
    if current.retired:
        raise InvalidRequest(f"skill {name!r} is retired")
    if any(char.isspace() for char in use_id):
        raise InvalidRequest(f"skill use id {use_id!r} holds whitespace")
    recent = current.metadata.get(RECENT_USES, "").split()
    if use_id and use_id in recent:
        return None
    metadata = current.metadata
    if use_id:
        metadata = {**metadata, RECENT_USES: " ".join([*recent, use_id][-RECENT_USES_KEPT:])}
    utility, uses = update_utility(
        _number(current.params, "utility", 0.0),
        int(_number(current.params, "uses", 0)),
        delta,
        delta_max=delta_max,
    )
    params = {**current.params, "utility": utility, "uses": uses}
    new = msgspec.structs.replace(
        current, params=params, metadata=metadata, version=current.version + 1, updated_at=now
    )
    return new, f"skill use {_label(new)}: Δ {delta:+.4g}, utility {utility:.4g} over {uses} uses"
