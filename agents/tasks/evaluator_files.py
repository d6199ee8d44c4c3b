"""The built-in ``files`` task: a program scored by the user's evaluator file, OpenEvolve's
convention run unchanged (``[campaign] program = "initial_program.py"``, ``evaluator =
"evaluator.py"``).

The evaluator's text travels inside the campaign's spec (``task.evaluator_source``, read when the
campaign is submitted) and from there in every ``EvaluateWork.task_params``, like ``prompt_qa``'s
dataset: an evaluator agent on another host needs no file, and a file edited during the campaign
does not change how its candidates are scored. ``evaluator_harness.py`` runs it in the sandbox,
with the interpreter and packages evobus runs with, and scores its metrics by OpenEvolve's rule.
An evaluator that is a folder (SkyDiscover's ``evaluate.sh`` protocol) travels as its path and
runs by ``evaluator_folder.py`` and ``folder_harness.py`` instead.

Instances are repetitions of one evaluation, ``"0"``, ``"1"``, …. An evaluator file is taken
for deterministic (``deterministic``) unless the campaign says ``[task] deterministic = false``:
then a repetition says nothing new, and both splits are the one instance ``"0"`` — each program
is scored once (the orchestrator reuses that score, agents/roles/orchestrator/observed.py). For a
noisy evaluator there are ``validation_episodes`` repetitions for validation and
``train_instances`` more for the train split; each instance in an evaluation is one call of
the evaluator, a repeated one too.

The failure score is -1e9, far below any score an evaluator gives in practice: a candidate that
fails must never be taken for an improvement, whatever the scale of the metrics. Evaluations
that failed on every instance are left out of charts and reports (their event has an error),
so the number shows nowhere else.
"""

from __future__ import annotations

import ast
import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from evobus.agents.tasks.base import (
    CANDIDATE_PROCESS_FILE,
    CONFIG_FILE,
    HARNESS_FILE,
    TaskParams,
    package_source,
    parse_result_line,
)
from evobus.agents.tasks.candidate_process import CANDIDATE_FILE
from evobus.agents.tasks.errors import InvalidInstanceError, TaskError
from evobus.agents.tasks.evaluator_folder import FOLDER_PARAM, folder_sandbox_files
from evobus.agents.tasks.evaluator_process import EVALUATOR_FILE, OUTPUT_FILE, SHIM_DIR, stage_name
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import FILES_TASK, TaskSection
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.results import InstanceScore
from evobus.schemas.tools import ToolSpec

FAILURE_SCORE = -1e9
EVALUATOR_PARAM = "evaluator"
THRESHOLDS_PARAM = "cascade_thresholds"
PARAMS_PARAM = "params"
NAME_PARAM = "evaluator_name"  # the user's name for the evaluator file, for its errors
FILES_PARAM = "evaluator_files"  # the files it uses beside it: JSON, relative path → base64
EVALUATOR_PROCESS_FILE = "evaluator_process.py"

DESCRIPTION = (
    "Improve a Python program that the campaign's evaluator file scores (OpenEvolve's "
    "convention): `evaluate(program_path)` in evaluator.py imports or runs the program and "
    "returns metrics, and the score is the metric `combined_score`, or the mean of the numeric "
    "metrics when there is none; higher is better. With a cascade, `evaluate_stage1` runs "
    "first and later stages only when the score so far reaches their threshold. An evaluation's "
    "feedback lists the metrics, the evaluator's other results and artifacts, and the end of "
    "what it printed. Keep everything the evaluator relies on: the functions it calls, their "
    "signatures and what they return, and all code outside EVOLVE-BLOCK markers."
)
SIGNATURE = (
    "evaluate(program_path) -> dict[str, float] | EvaluationResult"
    "  # the evaluator's, not the program's: it imports or runs the program at program_path"
)
# What ``seed_artifact`` gives: the task has no program of its own, the campaign names one.
NO_SEED = '"""The files task has no seed of its own: campaign.program names the program."""\n'

SHIM_INIT = '"""evobus\'s stand-in for OpenEvolve, where OpenEvolve is not installed."""\n'
SHINKA_INIT = '"""evobus\'s stand-in for ShinkaEvolve, where ShinkaEvolve is not installed."""\n'
SHINKA_CORE = (
    '"""run_shinka_eval, as evaluate.py files import it (shinka_wrap_eval.py)."""\n\n'
    "from shinka.core.wrap_eval import run_shinka_eval\n\n"
    '__all__ = ["run_shinka_eval"]\n'
)
SHIM_SOURCE = '''"""Stand-in for ``openevolve.evaluation_result`` (OpenEvolve 0.4), shipped by
evobus into the sandbox for evaluators that import it where OpenEvolve is not installed."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvaluationResult:
    """Metrics (name -> number) and artifacts (name -> text or bytes) of an evaluation."""

    metrics: dict[str, float]
    artifacts: dict[str, str | bytes] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, metrics: dict[str, float]) -> EvaluationResult:
        return cls(metrics=metrics)

    def to_dict(self) -> dict[str, float]:
        return self.metrics

    def has_artifacts(self) -> bool:
        return bool(self.artifacts)

    def get_artifact_keys(self) -> list[str]:
        return list(self.artifacts)

    def get_artifact_size(self, key: str) -> int:
        value = self.artifacts.get(key)
        if value is None:
            return 0
        return len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8"))

    def get_total_artifact_size(self) -> int:
        return sum(self.get_artifact_size(key) for key in self.artifacts)
'''


def evaluator_problem(source: str, filename: str, *, cascade: bool) -> str:
    """Why ``source`` cannot be an evaluator file ("" when it can), found without running it:
    it does not compile, or binds no ``evaluate`` (nor ``evaluate_stage1`` where ``cascade``)
    at its top level."""
    try:
        tree = ast.parse(source, filename)
        compile(tree, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        code = (exc.text or "").strip()
        where = f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
        return f"{filename} does not compile: {where}" + (f": {code}" if code else "")
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"{filename} does not compile: {type(exc).__name__}: {exc}"
    names = _top_level_names(tree.body)
    if None in names or "evaluate" in names or (cascade and stage_name(1) in names):
        return ""
    if _shinka_main(tree.body):  # ShinkaEvolve's evaluate.py (evaluator_process.shinka_main)
        return ""
    stages = " (or evaluate_stage1, with [task] cascade_thresholds)" if not cascade else ""
    return (
        f"{filename} defines no evaluate(program_path){stages}, nor ShinkaEvolve's "
        "main(program_path, results_dir)"
    )


def _shinka_main(body: Sequence[ast.stmt]) -> bool:
    """Whether a module body defines ``main`` with two positional parameters or more."""
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name == "main"
        and len(node.args.posonlyargs) + len(node.args.args) >= 2
        for node in body
    )


def _top_level_names(body: Sequence[ast.stmt]) -> set[str | None]:
    """The names a module body binds, into ``if``/``try``/``with`` blocks; None stands for a
    star import, after which any name may be bound."""
    names: set[str | None] = set()
    for node in body:
        match node:
            case ast.FunctionDef() | ast.AsyncFunctionDef() | ast.ClassDef():
                names.add(node.name)
            case ast.Assign() | ast.AnnAssign() | ast.AugAssign():
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            case ast.Import() | ast.ImportFrom():
                for alias in node.names:
                    names.add(None if alias.name == "*" else alias.asname or alias.name)
            case ast.If() | ast.Try() | ast.With() | ast.For() | ast.While():
                for block in ("body", "orelse", "finalbody"):
                    names |= _top_level_names(getattr(node, block, []))
                for handler in getattr(node, "handlers", []):
                    names |= _top_level_names(handler.body)
    return names


def entrypoint_of(program: str, evaluator: str) -> str:
    """The program's function the evaluator calls, when that is evident from the evaluator's
    text (its code, and the code it runs in a subprocess, held in strings): the first top-level
    function of ``program`` that it calls as an attribute or names in quotes
    (``program.run_packing()``, ``getattr(module, "run")``), else that it calls at all, else
    that it mentions, else the program's first function; "" when the program defines none or
    does not parse.

    The actor keeps that function's signature in every child (the offline engine needs one).
    """
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    evidence = (
        r"\.{}\s*\(|[\"']{}[\"']",  # module.name(…), getattr(module, "name")
        r"\b{}\s*\(",  # name(…)
        r"\b{}\b",  # name
    )
    for pattern in evidence:
        for name in functions:
            if re.search(pattern.format(name, name), evaluator):
                return name
    return functions[0] if functions else ""


def repetition(instance: str) -> int:
    """The repetition an instance id names.

    Raises:
        InvalidInstanceError: not a non-negative whole number written plainly.
    """
    if not instance.isdigit() or str(int(instance)) != instance:
        raise InvalidInstanceError(instance, "a files instance is a repetition number: 0, 1, …")
    return int(instance)


def _harness_files(evaluator: str, config: Mapping[str, object]) -> dict[str, str | bytes]:
    """The files the sandbox holds for evobus beside the evaluator's own: ``harness.py``, the
    modules it runs the evaluator and the candidate with, the evaluator as ``evaluator.py``,
    the ``openevolve`` and ``shinka`` stand-ins and ``task.json``."""
    return {
        HARNESS_FILE: package_source("evaluator_harness.py"),
        CANDIDATE_PROCESS_FILE: package_source(CANDIDATE_PROCESS_FILE),
        EVALUATOR_PROCESS_FILE: package_source(EVALUATOR_PROCESS_FILE),
        EVALUATOR_FILE: evaluator,
        f"{SHIM_DIR}/openevolve/__init__.py": SHIM_INIT,
        f"{SHIM_DIR}/openevolve/evaluation_result.py": SHIM_SOURCE,
        f"{SHIM_DIR}/shinka/__init__.py": SHINKA_INIT,
        f"{SHIM_DIR}/shinka/core/__init__.py": SHINKA_CORE,
        f"{SHIM_DIR}/shinka/core/wrap_eval.py": package_source("shinka_wrap_eval.py"),
        CONFIG_FILE: json.dumps(config, indent=2) + "\n",
    }


def _sandbox_names(paths: Iterable[str]) -> list[str]:
    """Those of ``paths`` (files the evaluator uses beside it) that would take the place of a
    file or folder the sandbox holds for evobus (``_harness_files``, the candidate, the
    evaluator's output, the ``tools`` package), in order."""
    own = {*_harness_files("", {}), CANDIDATE_FILE, OUTPUT_FILE, "tools/"}
    folders = {name.split("/")[0] for name in own if "/" in name}
    return sorted(p for p in paths if p in own or p.split("/")[0] in folders)


class EvaluatorFilesTask:
    """A program scored by the campaign's evaluator file (``evaluate(program_path)``)."""

    name = FILES_TASK
    description = DESCRIPTION
    signature = SIGNATURE
    failure_score = FAILURE_SCORE
    accepts_params = True  # ``[task.params]`` go to the evaluator
    # An evaluator file scores a program the same way every time unless the campaign says
    # otherwise (``[task] deterministic = false``): most are, and a repeat costs a whole run.
    deterministic = True

    def seed_artifact(self) -> Artifact:
        """A placeholder: the campaign's ``program`` is the seed (``campaign_seed``)."""
        return Artifact(source=NO_SEED, entrypoint="")

    def campaign_seed(self, params: TaskSection, source: str) -> Artifact:
        """The campaign's program as the seed, with the function the evaluator calls as its
        entrypoint (``entrypoint_of``)."""
        return Artifact(source=source, entrypoint=entrypoint_of(source, params.evaluator_source))

    def instances(
        self, params: TaskSection, split: Literal["train", "validation"] = "validation"
    ) -> tuple[str, ...]:
        """Deterministic (unless ``[task] deterministic = false``): ``0`` for both splits, a
        repetition says nothing new. Otherwise validation: repetitions ``0`` …
        ``validation_episodes - 1``; train: the ``train_instances`` repetitions after those
        (the validation ones when none). An evaluator folder's train repetitions are always
        the ones after validation's (as many, when none are set): its ``train`` and ``test``
        modes may score a program differently, so no score of one split stands for the
        other's."""
        if params.evaluator_folder and split == "train":
            count = 1 if params.deterministic is not False else params.validation_episodes
            return tuple(str(count + i) for i in range(params.train_instances or count))
        if params.deterministic is not False:
            return ("0",)
        count = params.validation_episodes
        if split == "train" and params.train_instances:
            return tuple(str(count + i) for i in range(params.train_instances))
        return tuple(str(i) for i in range(count))

    def task_params(self, params: TaskSection) -> TaskParams:
        """The evaluator's text, the cascade's thresholds and the evaluator's params (both as
        JSON), checked before they travel.

        An evaluator folder (SkyDiscover's protocol, evaluator_folder.py) travels as its path
        instead, checked at start (``folder_problem``) and on each evaluator's host.

        Raises:
            CampaignConfigError: no evaluator, or one that does not compile or defines no
                ``evaluate`` (``evaluator_problem``).
        """
        if params.evaluator_folder:
            return {FOLDER_PARAM: params.evaluator_folder}
        if not params.evaluator_source:
            raise CampaignConfigError(
                "<campaign>", "campaign.evaluator", "the files task needs an evaluator file"
            )
        cascade = bool(params.cascade_thresholds)
        name = params.evaluator_name or EVALUATOR_FILE
        problem = evaluator_problem(params.evaluator_source, name, cascade=cascade)
        if problem:
            raise CampaignConfigError("<campaign>", "campaign.evaluator", problem)
        taken = _sandbox_names(params.evaluator_files)
        if taken:
            raise CampaignConfigError(
                "<campaign>",
                "campaign.evaluator",
                f"{name} uses {taken[0]} beside it, a name evobus's sandbox gives a file of its "
                "own: rename it",
            )
        files = {
            path: base64.b64encode(data).decode("ascii")
            for path, data in params.evaluator_files.items()
        }
        return {
            EVALUATOR_PARAM: params.evaluator_source,
            THRESHOLDS_PARAM: json.dumps(list(params.cascade_thresholds)),
            PARAMS_PARAM: json.dumps(params.params),
            NAME_PARAM: name,
            FILES_PARAM: json.dumps(files),
        }

    def sandbox_files(
        self, instances: Sequence[str], params: Mapping[str, int | float | str | bool]
    ) -> Mapping[str, str | bytes]:
        """``harness.py``, the modules it runs the evaluator with, the evaluator, the
        ``openevolve`` stand-in and ``task.json``, and the files the evaluator uses beside it
        (schemas/support_files.py) at their places.

        Raises:
            InvalidInstanceError: an instance is not a repetition number.
            TaskError: ``params`` lack the evaluator, or their JSON is broken.
        """
        for instance in instances:
            repetition(instance)
        if params.get(FOLDER_PARAM):  # SkyDiscover's evaluator folder: evaluator_folder.py
            return folder_sandbox_files(instances, params, self.failure_score)
        evaluator = params.get(EVALUATOR_PARAM)
        if not isinstance(evaluator, str) or not evaluator:
            raise TaskError("the files task's evaluation carries no evaluator")
        try:
            thresholds = json.loads(str(params.get(THRESHOLDS_PARAM, "[]")))
            given = json.loads(str(params.get(PARAMS_PARAM, "{}")))
            beside = {
                path: base64.b64decode(data, validate=True)
                for path, data in json.loads(str(params.get(FILES_PARAM, "{}"))).items()
            }
        except (ValueError, AttributeError) as exc:
            raise TaskError(f"the files task's params are not JSON: {exc}") from None
        config = {
            "instances": list(instances),
            "failure_score": self.failure_score,
            "cascade_thresholds": thresholds,
            "params": given,
            "evaluator_name": str(params.get(NAME_PARAM, EVALUATOR_FILE)),
        }
        return {**beside, **_harness_files(evaluator, config)}  # task_params refuses a clash

    def parse_output(self, stdout: bytes, instances: Sequence[str]) -> tuple[InstanceScore, ...]:
        """Per-repetition scores, metrics and feedback.

        Raises:
            TaskOutputError: no valid result line for exactly these instances.
        """
        return parse_result_line(stdout, instances)

    def tools(self) -> tuple[ToolSpec, ...]:
        """None: the evaluator brings what it needs."""
        return ()
