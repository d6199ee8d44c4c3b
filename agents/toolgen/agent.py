"""The tool-generator process: validate a tool's tests in the sandbox, then register it."""

from __future__ import annotations

import hashlib
import keyword
from collections.abc import Sequence

from agents.registry.client import RegistryClient
from agents.registry.errors import RegistryUnavailable, ResourceNotFound
from agents.runtime import AgentProcess, WorkBinding
from agents.work import expect, on_dead, result_outbound
from bus.envelope import MessageContext
from bus.errors import Reject, Retry
from bus.publisher import Outbound
from infra.sandbox import run_sandboxed
from schemas.campaign import SandboxSection
from schemas.registry import Resource
from schemas.results import ToolResult
from schemas.tools import ToolRecord, ToolSpec
from schemas.work import ToolWork, Work

PASSED = "EVOBUS-TOOL-TESTS-PASSED"


def validation_files(spec: ToolSpec) -> dict[str, str]:
    """The sandbox files that import the tool and run its tests."""
    return {
        "tools/__init__.py": "",
        f"tools/{spec.name}.py": spec.source,
        # ``python -I`` keeps the working directory off sys.path: put it back for ``tools``.
        "check_tool.py": (
            "import os, sys\nsys.path.insert(0, os.getcwd())\n"
            f"from tools.{spec.name} import *\n{spec.tests}\nprint({PASSED!r})\n"
        ),
    }


async def validate(spec: ToolSpec, limits: SandboxSection) -> str:
    """Run the tool's tests in the sandbox; "" when they pass, else why not."""
    if not spec.name.isidentifier() or keyword.iskeyword(spec.name):
        return f"tool name {spec.name!r} is not a Python identifier"
    try:
        compile(spec.source, f"tools/{spec.name}.py", "exec")
    except SyntaxError as exc:
        return f"tool source does not parse: {exc}"
    run = await run_sandboxed(validation_files(spec), ["check_tool.py"], limits)
    if run.failure():
        return f"tests failed ({run.isolation}): {run.failure()}"
    if PASSED.encode() not in run.stdout:
        return "tests did not run to the end"
    return ""


def tool_record(resource: Resource) -> ToolRecord:
    """A registered tool resource as the ToolRecord that results carry."""
    tests = resource.metadata.get("tests", "")
    return ToolRecord(
        name=resource.name,
        version=resource.version,
        source=resource.source,
        tests=tests,
        description=resource.description,
        contract=resource.contract,
        digest=hashlib.sha256(f"{resource.source}\0{tests}".encode()).hexdigest(),
        registered_at=resource.updated_at,
    )


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``tool`` stage; tools are registered as AGP resources in the registry."""
    registry = RegistryClient(proc.nc)

    async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
        work = expect(item, ToolWork)
        if work.spec is None:
            raise Reject("tool requests are not served yet")
        spec = work.spec
        error = await validate(spec, SandboxSection())
        if error:
            result = ToolResult(
                work_id=work.work_id, campaign=work.campaign, name=spec.name, error=error
            )
            return [result_outbound(result, "tool")]
        try:
            before = await registry.get("tool", spec.name)
        except ResourceNotFound:
            before = None
        try:
            resource = await registry.register(
                "tool",
                spec.name,
                description=spec.description,
                source=spec.source,
                metadata={"tests": spec.tests},
                trainable=True,
            )
        except RegistryUnavailable as exc:
            raise Retry(str(exc), delay=2.0) from None
        reused = before is not None and before.version == resource.version
        result = ToolResult(
            work_id=work.work_id,
            campaign=work.campaign,
            name=spec.name,
            record=tool_record(resource),
            reused=reused,
        )
        return [result_outbound(result, "tool")]

    return [WorkBinding("tool", handle, on_dead("tool"))]
