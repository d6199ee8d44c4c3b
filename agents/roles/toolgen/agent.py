"""The tool-generator process: tools validated in the sandbox, registered with their contracts.

Two kinds of ``tool`` work. A task's own tool (``ToolWork.spec``) is validated against its tests
and registered as given. A tool request (``ToolWork.request``, from the actor) follows AGS's tool
generator (autogenesis-agp.md §4.1, §5.2). The registry's tool of that name is validated
against the request's tests and, when it fails, refined through the model at most
``llm.tool_refine_rounds`` times. Without one, the best semantic-search match is taken when it
passes the request's tests (and registered under the asked name). Otherwise a new tool is
synthesised from the request, with tests, and refined the same way. Only a version whose tests
pass in the sandbox is registered; anything else is refused with the last failure. An unchanged
registered tool that passes is returned as it is (``reused``), without a new version. A registry
that is away (killed, restarting) is waited for inside the handler, however long it takes
(``until_answered``), rather than the work being retried into the dead-letter stream.
"""

from __future__ import annotations

import hashlib
import keyword
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import anyio

from evobus.agents.prompts.context import tools_md
from evobus.agents.registry_api.client import RegistryClient, until_answered
from evobus.agents.registry_api.errors import RegistryError, ResourceNotFound
from evobus.agents.runtime.models import CampaignModels, ModelAccess, engine_name, model_failure
from evobus.agents.runtime.process import AgentProcess, WorkBinding
from evobus.agents.runtime.work import result_outbound
from evobus.bus.envelope import MessageContext
from evobus.bus.publisher import Outbound
from evobus.infra.llm import LLMError
from evobus.infra.sandbox import run_sandboxed
from evobus.schemas.campaign import SandboxSection
from evobus.schemas.llm import ToolDraft, ToolNeed, Usage
from evobus.schemas.registry import Resource
from evobus.schemas.results import ToolResult
from evobus.schemas.tools import ToolRecord, ToolSpec
from evobus.schemas.work import ToolWork

log = logging.getLogger(__name__)
T = TypeVar("T")

SEARCH_HITS = 3
TESTS_MODULE = "tool_tests"
# Run by ``python -I check_tool.py``: it reads the pass marker from stdin before the tool is
# imported, keeps it in a local, imports the tests (which import the tool) and prints the marker
# only when they ran to the end. ``python -I`` keeps the working directory off sys.path: put it
# back for ``tools`` and the tests.
CHECK_TOOL = f"""\
import os, sys


def check():
    marker = sys.stdin.readline().strip()
    sys.path.insert(0, os.getcwd())
    import {TESTS_MODULE}
    print(marker, flush=True)


check()
"""


def validation_files(spec: ToolSpec) -> dict[str, str]:
    """The sandbox files that import the tool and run its tests (the pass marker is not one)."""
    return {
        "tools/__init__.py": "",
        f"tools/{spec.name}.py": spec.source,
        f"{TESTS_MODULE}.py": f"from tools.{spec.name} import *\n{spec.tests}\n",
        "check_tool.py": CHECK_TOOL,
    }


async def validate(spec: ToolSpec, limits: SandboxSection) -> str:
    """Run the tool's tests in the sandbox; "" when they pass, else why not.

    They pass when the run exits with status 0 and prints this validation's marker: a random
    nonce given on stdin, in no file of the sandbox, read before the tool is imported and kept
    in a local of ``check_tool.py``. That stops the trivial forge, a tool that prints a known
    marker at import and exits before its tests run. It is no proof against a tool written to
    defeat its tests: running in the same process, it can find the marker (frame inspection)
    or replace what the tests call. A validated tool stays untrusted code: it only ever runs in
    the sandbox, and candidates that use it are scored by the evaluator's harness, out of the
    tool's reach.
    """
    if not spec.name.isidentifier() or keyword.iskeyword(spec.name):
        return f"tool name {spec.name!r} is not a Python identifier"
    try:
        compile(spec.source, f"tools/{spec.name}.py", "exec")
    except SyntaxError as exc:
        return f"tool source does not parse: {exc}"
    marker = f"EVOBUS-TOOL-TESTS-PASSED-{secrets.token_hex(16)}"
    run = await run_sandboxed(
        validation_files(spec), ["check_tool.py"], limits, stdin=f"{marker}\n".encode()
    )
    if run.failure():  # the timeout, a limit, a signal or an exit status other than 0
        return f"tests failed ({run.isolation}): {run.failure()}"
    if marker.encode() not in run.stdout:
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


def with_tests(need: ToolNeed, source: str, own_tests: str, description: str) -> ToolSpec:
    """A tool for ``need``: the request's tests always run, as they are, before its own (once:
    a registered tool already carries the tests of the request that made it)."""
    asked, own = need.tests.strip(), own_tests.strip()
    tests = own if asked in own else "\n".join(t for t in (asked, own) if t)
    return ToolSpec(name=need.name, source=source, tests=tests, description=description)


@dataclass
class Attempt:
    """Where serving one request got to."""

    spec: ToolSpec | None = None
    found: Resource | None = None  # the registered tool the attempt started from
    own_tests: str = ""
    origin: str = ""
    failure: str = ""
    usage: Usage = field(default_factory=Usage)
    engine: str = ""


def unchanged(attempt: Attempt) -> bool:
    """Whether the attempt ends where it started: a registered tool of the asked name that
    passes as it is (nothing to register)."""
    found, spec = attempt.found, attempt.spec
    return (
        found is not None
        and spec is not None
        and found.name == spec.name
        and found.source == spec.source
        and found.metadata.get("tests", "") == spec.tests
    )


class ToolGenerator:
    """The ``tool`` stage's handler with the registry and the campaigns' models."""

    def __init__(
        self, registry: RegistryClient, models: ModelAccess, stopping: anyio.Event | None = None
    ) -> None:
        self.registry = registry
        self.models = models
        self.stopping = stopping  # set when the process stops: waits for the registry end

    async def _answered(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``call()`` once a registry answers it (``until_answered``)."""
        return await until_answered(call, what, stopping=self.stopping)

    async def handle(self, work: ToolWork, ctx: MessageContext) -> Sequence[Outbound]:
        limits = (await self.models.record(work.campaign)).spec.sandbox
        if work.request is not None:
            return [await self.serve(work, work.request, limits)]
        if work.spec is None:
            return [self.refused(work, "", "the work item has neither a spec nor a request")]
        error = await validate(work.spec, limits)
        if error:
            return [self.refused(work, work.spec.name, error)]
        return [await self.register(work, work.spec, {"origin": "task"}, Usage())]

    def refused(
        self, work: ToolWork, name: str, error: str, usage: Usage | None = None
    ) -> Outbound:
        result = ToolResult(
            work_id=work.work_id,
            campaign=work.campaign,
            name=name,
            error=error,
            usage=usage or Usage(),
        )
        return result_outbound(result, "tool")

    async def register(
        self, work: ToolWork, spec: ToolSpec, metadata: dict[str, str], usage: Usage
    ) -> Outbound:
        """Register ``spec`` (validated) as a tool resource; reused when unchanged. A registry
        that is away is waited for (``until_answered``): the work stays with this handler."""
        before = await self._answered(
            lambda: self._registered(spec.name), f"tool {spec.name} ({work.work_id})"
        )
        resource = await self._answered(
            lambda: self.registry.register(
                "tool",
                spec.name,
                description=spec.description,
                source=spec.source,
                metadata={"tests": spec.tests, **metadata},
                trainable=True,
            ),
            f"tool {spec.name} ({work.work_id})",
        )
        result = ToolResult(
            work_id=work.work_id,
            campaign=work.campaign,
            name=spec.name,
            record=tool_record(resource),
            reused=before is not None and before.version == resource.version,
            usage=usage,
        )
        return result_outbound(result, "tool")

    async def _registered(self, name: str) -> Resource | None:
        """The registered tool ``name``, or None."""
        try:
            return await self.registry.get("tool", name)
        except ResourceNotFound:
            return None

    async def serve(self, work: ToolWork, need: ToolNeed, limits: SandboxSection) -> Outbound:
        """AGS §5.2: retrieve → validate → refine (≤ R rounds) → else synthesise → register."""
        if not need.name.isidentifier() or keyword.iskeyword(need.name):
            return self.refused(work, need.name, f"{need.name!r} is not a Python identifier")
        models = await self.models.for_campaign(work.campaign)
        attempt = await self.retrieve(need)
        try:
            if attempt.spec is not None:
                attempt.failure = await validate(attempt.spec, limits)
                same_name = attempt.found is not None and attempt.found.name == need.name
                if attempt.failure and same_name and models is not None:
                    # The requested tool exists but fails: refine it. A search match that fails
                    # the request's tests is not the tool asked for: synthesise instead.
                    await self.refine(models, need, attempt, limits)
            if attempt.spec is None or attempt.failure:
                if models is None:
                    why = attempt.failure or "no registered tool matches"
                    return self.refused(
                        work, need.name, f"{why}; no model to write one (provider offline)"
                    )
                found_failure = attempt.failure
                attempt = Attempt(usage=attempt.usage)
                await self.synthesise(models, need, attempt)
                attempt.failure = await validate(attempt.spec, limits) if attempt.spec else ""
                if attempt.failure:
                    await self.refine(models, need, attempt, limits)
                if attempt.failure and found_failure:
                    attempt.failure = f"{attempt.failure} (the registered match: {found_failure})"
        except LLMError as exc:
            return model_failure(work, "tool", exc, attempt.usage)
        if attempt.spec is None or attempt.failure:
            return self.refused(work, need.name, attempt.failure, attempt.usage)
        if unchanged(attempt):
            assert attempt.found is not None
            result = ToolResult(
                work_id=work.work_id,
                campaign=work.campaign,
                name=need.name,
                record=tool_record(attempt.found),
                reused=True,
                usage=attempt.usage,
            )
            return result_outbound(result, "tool")
        metadata = {"origin": attempt.origin, "need": need.need}
        if attempt.engine:
            metadata["engine"] = attempt.engine
        return await self.register(work, attempt.spec, metadata, attempt.usage)

    async def retrieve(self, need: ToolNeed) -> Attempt:
        """The registered tool of the requested name, else the best semantic match (a registry
        that is away is waited for)."""
        what = f"tool request {need.name}"
        try:
            found = await self._answered(lambda: self._registered(need.name), what)
            if found is not None:
                origin = f"registered {found.name} v{found.version}"
            else:
                if not need.tests.strip():
                    return Attempt()  # without tests nothing shows that a match does the job
                hits = await self._answered(
                    lambda: self.registry.search("tool", f"{need.name} {need.need}", SEARCH_HITS),
                    what,
                )
                if not hits:
                    return Attempt()
                found = hits[0][0]
                origin = f"search match {found.name} v{found.version}"
        except RegistryError as exc:
            log.warning("tool search failed: %s", exc)
            return Attempt()
        own = found.metadata.get("tests", "")
        spec = with_tests(need, found.source, own, found.description or need.need)
        return Attempt(spec=spec, found=found, own_tests=own, origin=origin)

    async def synthesise(self, models: CampaignModels, need: ToolNeed, attempt: Attempt) -> None:
        """A new tool from the ``tool_generator`` prompt."""
        try:
            shown = [tool for tool, _ in await self.registry.search("tool", need.need, 5)]
        except RegistryError:
            shown = []
        values = {
            "need": need.need,
            "tests": need.tests or "# (none given: write your own)",
            "tools": tools_md(shown),
            "tool_name": need.name,
        }
        await self._draft(models, "tool_generator", values, need, attempt, "synthesised")

    async def refine(
        self, models: CampaignModels, need: ToolNeed, attempt: Attempt, limits: SandboxSection
    ) -> None:
        """At most ``tool_refine_rounds`` model fixes of a failing tool (AGS §5.2)."""
        for _ in range(models.section.tool_refine_rounds):
            assert attempt.spec is not None
            values = {
                "need": need.need,
                "tool_name": need.name,
                "source": attempt.spec.source,
                "tests": need.tests or "# (none given)",
                "own_tests": attempt.own_tests or "# (none)",
                "failure": attempt.failure,
            }
            await self._draft(models, "tool_refiner", values, need, attempt, "refined")
            attempt.failure = await validate(attempt.spec, limits)
            if not attempt.failure:
                return

    async def _draft(
        self,
        models: CampaignModels,
        prompt_name: str,
        values: Mapping[str, object],
        need: ToolNeed,
        attempt: Attempt,
        how: str,
    ) -> None:
        try:
            out, prompt = await models.ask("actor", prompt_name, values, ToolDraft)
        except LLMError as exc:
            usage = getattr(exc, "usage", None)
            if isinstance(usage, Usage):
                attempt.usage = attempt.usage + usage
            raise
        attempt.usage = attempt.usage + out.usage
        draft = out.values[0]
        attempt.own_tests = draft.tests
        attempt.spec = with_tests(need, draft.source, draft.tests, draft.description or need.need)
        attempt.origin = how if not attempt.origin else f"{attempt.origin}, {how}"
        attempt.engine = engine_name(out.model, simulator=out.simulator, prompt=prompt.ref)


async def setup(proc: AgentProcess) -> Sequence[WorkBinding]:
    """Serve the ``tool`` stage; tools are registered as AGP resources in the registry."""
    registry = RegistryClient(proc.nc)
    generator = ToolGenerator(registry, ModelAccess(proc, registry), proc.stop_requested)
    return [WorkBinding.typed("tool", ToolWork, generator.handle)]
