"""The tool-generator process: validate a tool's tests in the sandbox, then register it."""

from __future__ import annotations

import keyword
from collections.abc import Sequence

from agents.runtime import AgentProcess, WorkBinding
from agents.toolgen.registry import ToolRegistry
from agents.work import expect, on_dead, result_outbound
from bus import subjects
from bus.envelope import MessageContext
from bus.publisher import Outbound
from bus.streams import key_value
from infra.sandbox import run_sandboxed
from schemas.campaign import SandboxSection
from schemas.results import ToolResult
from schemas.tools import ToolSpec
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


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``tool`` stage."""
    registry = ToolRegistry(await key_value(proc.js, subjects.KV_TOOLS))

    async def handle(item: Work, ctx: MessageContext) -> Sequence[Outbound]:
        work = expect(item, ToolWork)
        spec = work.spec
        error = await validate(spec, SandboxSection())
        if error:
            result = ToolResult(
                work_id=work.work_id, campaign=work.campaign, name=spec.name, error=error
            )
        else:
            record, reused = await registry.register(spec)
            result = ToolResult(
                work_id=work.work_id,
                campaign=work.campaign,
                name=spec.name,
                record=record,
                reused=reused,
            )
        return [result_outbound(result, "tool")]

    return [WorkBinding("tool", handle, on_dead("tool"))]
