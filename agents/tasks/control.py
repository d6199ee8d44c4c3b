"""What the Gymnasium control tasks share: seeded episodes as instances, one harness, evidence.

A control task evolves ``policy(obs)``; one instance is one seeded episode of ``max_steps``
steps, scored by its return. The sandbox runs ``gym_harness`` with a launcher naming the task's
environment; each subclass gives the environment, the words and the seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

from evobus.agents.tasks.base import (
    EVIDENCE_FILE,
    TaskParams,
    harness_files,
    package_source,
    parse_result_line,
)
from evobus.agents.tasks.errors import InvalidInstanceError
from evobus.schemas.artifacts import Artifact
from evobus.schemas.campaign import TaskSection
from evobus.schemas.results import InstanceScore
from evobus.schemas.tools import ToolSpec

# What gym_harness imports to draw evidence; the module ships under this name when asked for.
EVIDENCE_MODULE = "control_evidence"


def episode_seed(instance: str) -> int:
    """The episode seed an instance id names.

    Raises:
        InvalidInstanceError: not an integer >= 0 written plainly.
    """
    try:
        seed = int(instance)
    except ValueError:
        raise InvalidInstanceError(instance, "an episode seed must be an integer") from None
    if seed < 0 or str(seed) != instance:
        raise InvalidInstanceError(instance, "an episode seed is written as an integer >= 0")
    return seed


def launcher(env_id: str) -> str:
    """The lines that, appended to ``gym_harness.py``, make it ``harness.py`` for ``env_id``.

    The harness module stays importable (tests, type checks) because only the launcher runs it;
    ``env_id`` must be a key of ``gym_harness.CONTROLS``.
    """
    # ENV_ID: the environment a warm sandbox's zygote makes once (gym_harness.warm_up).
    warm = f"\n\nENV_ID = {env_id!r}"
    return f'{warm}\n\nif __name__ == "__main__":\n    sys.exit(main({env_id!r}))\n'


class ControlTask:
    """A Gymnasium control task: ``policy(obs)`` is scored by episode return.

    Subclasses set ``name``, ``description``, ``signature``, ``failure_score``, ``env_id`` (a key
    of ``gym_harness.CONTROLS``), ``seed_source`` and, where the failure score is only worse than
    every real return for episodes up to some length, that ``step_limit``.
    """

    name: str
    description: str
    signature: str
    failure_score: float
    env_id: ClassVar[str]
    seed_source: ClassVar[str]
    step_limit: ClassVar[int | None] = None
    evidence_file: ClassVar[str] = EVIDENCE_FILE

    def seed_artifact(self) -> Artifact:
        """The seed policy: the right structure with constants that do badly."""
        return Artifact(source=self.seed_source, entrypoint="policy")

    def instances(
        self, params: TaskSection, split: Literal["train", "validation"] = "validation"
    ) -> tuple[str, ...]:
        """Validation: seeds ``episode_seed …`` (``validation_episodes`` of them); train: the
        ``train_instances`` seeds after those (the validation ones when there are none)."""
        first = params.episode_seed
        count = params.validation_episodes
        if split == "train" and params.train_instances:
            first, count = first + count, params.train_instances
        return tuple(str(first + i) for i in range(count))

    def task_params(self, params: TaskSection) -> TaskParams:
        """The episode length (at most ``step_limit``)."""
        return {"max_steps": self._episode_length(params)}

    def _episode_length(self, params: TaskSection | Mapping[str, int | float | str | bool]) -> int:
        if isinstance(params, TaskSection):
            steps = params.max_steps
        else:
            steps = int(params.get("max_steps", TaskSection().max_steps))
        return steps if self.step_limit is None else min(steps, self.step_limit)

    def sandbox_files(
        self, instances: Sequence[str], params: Mapping[str, int | float | str | bool]
    ) -> dict[str, str]:
        """``harness.py``, the module it runs the candidate with and its ``task.json``; with
        ``evidence`` set, the evidence renderer.

        Raises:
            InvalidInstanceError: an instance is not an episode seed.
        """
        for instance in instances:
            episode_seed(instance)
        config: dict[str, object] = {
            "instances": list(instances),
            "max_steps": self._episode_length(params),
            "failure_score": self.failure_score,
            "entrypoint": str(params.get("entrypoint", "policy")),
        }
        harness = package_source("gym_harness.py") + launcher(self.env_id)
        return harness_files(harness, config, params, EVIDENCE_MODULE)

    def parse_output(self, stdout: bytes, instances: Sequence[str]) -> tuple[InstanceScore, ...]:
        """Per-episode scores, feedback, metrics and start classes from the result line.

        Raises:
            TaskOutputError: no valid result line for exactly these instances.
        """
        return parse_result_line(stdout, instances)

    def tools(self) -> tuple[ToolSpec, ...]:
        """No helper tools unless a subclass ships some."""
        return ()
