"""The versioned tool registry in JetStream KV (``EVO_TOOLS``).

Keys: ``<name>.v<version>`` → ToolRecord; ``<name>.latest`` → the latest version number, moved
with compare-and-set so two tool generators never hand out the same version.
"""

from __future__ import annotations

import ast
import hashlib
import time

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from schemas.tools import ToolRecord, ToolRef, ToolSpec

_record_decoder = msgspec.msgpack.Decoder(ToolRecord)
_encoder = msgspec.msgpack.Encoder()


def digest(spec: ToolSpec) -> str:
    """Content hash of a tool's source and tests: equal digests are the same tool."""
    return hashlib.sha256(f"{spec.source}\0{spec.tests}".encode()).hexdigest()


def contract(spec: ToolSpec) -> str:
    """The tool's contract text: its description and public functions' signatures and docs."""
    lines = [f"tools.{spec.name}: {spec.description}".rstrip(": ")]
    tree = ast.parse(spec.source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            signature = f"{node.name}({ast.unparse(node.args)})"
            if node.returns is not None:
                signature += f" -> {ast.unparse(node.returns)}"
            doc = (ast.get_docstring(node) or "").strip().splitlines()
            lines.append(f"  {signature}" + (f"  # {doc[0]}" if doc else ""))
    return "\n".join(lines)


class ToolRegistry:
    """Reads and writes tool versions in a KV bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def latest(self, name: str) -> ToolRecord | None:
        """The newest registered version of ``name``, if any."""
        try:
            entry = await self._kv.get(f"{name}.latest")
        except KeyNotFoundError:
            return None
        assert entry.value is not None
        return await self.get(ToolRef(name=name, version=int(entry.value)))

    async def get(self, ref: ToolRef) -> ToolRecord:
        """One registered version.

        Raises:
            KeyNotFoundError: no such version.
        """
        entry = await self._kv.get(f"{ref.name}.v{ref.version}")
        assert entry.value is not None
        return _record_decoder.decode(entry.value)

    async def register(self, spec: ToolSpec, *, attempts: int = 5) -> tuple[ToolRecord, bool]:
        """Store ``spec`` as the next version, or return the latest if it is identical.

        Returns:
            the record and whether an existing identical version was reused.
        """
        wanted = digest(spec)
        for _ in range(attempts):
            try:
                pointer = await self._kv.get(f"{spec.name}.latest")
                assert pointer.value is not None
                current, revision = int(pointer.value), pointer.revision
            except KeyNotFoundError:
                current, revision = 0, None
            if current:
                existing = await self.get(ToolRef(name=spec.name, version=current))
                if existing.digest == wanted:
                    return existing, True
            record = ToolRecord(
                name=spec.name,
                version=current + 1,
                source=spec.source,
                tests=spec.tests,
                description=spec.description,
                contract=contract(spec),
                digest=wanted,
                registered_at=time.time(),
            )
            await self._kv.put(f"{spec.name}.v{record.version}", _encoder.encode(record))
            try:
                if revision is None:
                    await self._kv.create(f"{spec.name}.latest", str(record.version).encode())
                else:
                    await self._kv.update(
                        f"{spec.name}.latest", str(record.version).encode(), last=revision
                    )
            except KeyWrongLastSequenceError:
                continue  # another generator registered first: look again
            return record, False
        raise RuntimeError(f"tool {spec.name}: registry kept changing under us")
