"""An evaluator folder (SkyDiscover's container protocol) for the ``files`` task.

A folder with an executable ``evaluate.sh``, called as ``evaluate.sh <program path> <mode>``,
that prints one JSON object (folder_harness.py has the protocol), and a ``Dockerfile`` that
copies the folder to ``/benchmark`` and runs from there. evobus needs no Docker: it runs
``evaluate.sh`` in its own sandbox with the folder mounted read-only at ``/benchmark`` and that
as the working directory; of the Dockerfile it reproduces that copy and ``WORKDIR /benchmark``
(and calls ``evaluate.sh`` itself, as an ``ENTRYPOINT`` naming it would), and says at start
which of its other steps it does not (``unreproduced_steps``): their packages, base image and
environment are the sandbox's own, the interpreter evobus runs.

The folder is named by its path, not shipped with the campaign as an evaluator file's text is:
such folders hold data sets and binaries of any size, and every evaluation's work item would
carry them. An evaluator agent on another host needs the folder at the same path; one where it
is missing fails its evaluations saying so. The mode follows the evaluation's split, which the
orchestrator puts in the work's ``task_params`` (``SPLIT_PARAM``): ``train`` in the loop,
``test`` for validation, where a best is confirmed and the seed's reported score is measured.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from evobus.agents.tasks.base import (
    CANDIDATE_PROCESS_FILE,
    CONFIG_FILE,
    HARNESS_FILE,
    package_source,
)
from evobus.agents.tasks.folder_harness import MOUNT_POINT, SCRIPT

FOLDER_PARAM = "evaluator_folder"
# Set to "validation" in the task_params of a validation's work by the orchestrator; absent
# (or "train") on the train split's.
SPLIT_PARAM = "split"
DOCKERFILE = "Dockerfile"
FOLDER_HARNESS_FILE = "folder_harness.py"
MODES = {"train": "train", "validation": "test"}  # the split → evaluate.sh's mode

Params = Mapping[str, int | float | str | bool]


def folder_problem(folder: Path) -> str:
    """Why ``folder`` cannot be an evaluator folder here ("" when it can): it is no folder, or
    its ``evaluate.sh`` is missing, not executable, or (when evobus runs as root, so that the
    sandbox runs as a uid of its own) not readable and executable by others."""
    if not folder.is_dir():
        return f"{folder} is not a folder"
    script = folder / SCRIPT
    if not script.is_file():
        return f"{folder} has no {SCRIPT} (an evaluator folder runs `{SCRIPT} <program> <mode>`)"
    mode = script.stat().st_mode
    if not mode & stat.S_IXUSR:
        return f"{script} is not executable: chmod +x {shlex.quote(str(script))}"
    needed = stat.S_IROTH | stat.S_IXOTH
    if os.geteuid() == 0 and mode & needed != needed:
        return (
            f"{script} must be readable and executable by others: the sandbox runs it as a uid "
            f"of its own (chmod o+rx {shlex.quote(str(script))})"
        )
    return ""


@dataclass(frozen=True)
class DockerStep:
    """One instruction of a Dockerfile: its line, its keyword (upper case) and arguments."""

    line: int
    instruction: str
    arguments: str

    def __str__(self) -> str:
        return f"{self.instruction} {self.arguments}".strip()


def dockerfile_steps(text: str) -> list[DockerStep]:
    """The instructions of a Dockerfile: comments and blank lines dropped, lines continued
    with a trailing backslash joined (the step keeps its first line's number)."""
    steps: list[DockerStep] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction is dropped
        if not pending:
            start = number
        continued = line.endswith("\\")
        pending.append(line[:-1].strip() if continued else line)
        if continued:
            continue
        joined = " ".join(part for part in pending if part)
        pending = []
        keyword, _, arguments = joined.partition(" ")
        steps.append(DockerStep(start, keyword.upper(), arguments.strip()))
    if pending:
        joined = " ".join(part for part in pending if part)
        keyword, _, arguments = joined.partition(" ")
        steps.append(DockerStep(start, keyword.upper(), arguments.strip()))
    return steps


def _words(arguments: str) -> list[str]:
    """A step's arguments as words: its JSON form (``["a", "b"]``) or its shell form."""
    if arguments.startswith("["):
        try:
            found = json.loads(arguments)
        except ValueError:
            found = None
        if isinstance(found, list) and all(isinstance(w, str) for w in found):
            return found
    try:
        return shlex.split(arguments)
    except ValueError:
        return arguments.split()


def _in_mount(path: str, workdir: str) -> PurePosixPath | None:
    """Where ``path`` (relative to the image's ``workdir``) lies inside ``/benchmark``, as a
    relative path ("." for the mount point itself); None when it lies outside."""
    resolved = PurePosixPath(os.path.normpath(PurePosixPath(workdir) / path))
    try:
        return resolved.relative_to(MOUNT_POINT)
    except ValueError:
        return None


def _copied_in_place(sources: Sequence[str], target: str, workdir: str, folder: Path) -> bool:
    """Whether copying ``sources`` (relative to the folder, the build context) to ``target``
    leaves each where the mount shows it already: ``COPY . /benchmark``, ``COPY x.txt .``
    after ``WORKDIR /benchmark``, ``COPY data/ /benchmark/data/``."""
    place = _in_mount(target, workdir)
    if place is None or not sources:
        return False
    into = target.endswith("/") or target in (".", "./") or place == PurePosixPath(".")
    for source in sources:
        name = PurePosixPath(os.path.normpath(source))
        wildcard_or_url = any(c in source for c in "*?[") or "://" in source
        if name.is_absolute() or ".." in name.parts or wildcard_or_url:
            return False
        if name == PurePosixPath(".") or (folder / name).is_dir():
            lands = place  # a directory's contents are copied into the target
        else:
            lands = place / name.name if into or len(sources) > 1 else place
        if lands != name:
            return False
    return True


def unreproduced_steps(text: str, folder: Path = Path(".")) -> list[DockerStep]:
    """The steps of a Dockerfile that evobus's sandbox does not reproduce. It reproduces the
    copies of the folder's files to where the mount at ``/benchmark`` shows them (read-only),
    ``WORKDIR /benchmark`` (where ``evaluate.sh`` runs), and an ``ENTRYPOINT`` or ``CMD``
    that runs ``evaluate.sh`` (evobus calls it itself); ``folder`` tells its directories."""
    missed: list[DockerStep] = []
    workdir = "/"
    for step in dockerfile_steps(text):
        words = _words(step.arguments)
        plain = [w for w in words if not w.startswith("--")]
        match step.instruction:
            case "WORKDIR" if len(plain) == 1:
                workdir = os.path.normpath(PurePosixPath(workdir) / plain[0])
                done = _in_mount(workdir, "/") == PurePosixPath(".")
            case "COPY" | "ADD" if len(plain) >= 2:
                from_stage = any(w.startswith("--from") for w in words)
                done = not from_stage and _copied_in_place(plain[:-1], plain[-1], workdir, folder)
            case "ENTRYPOINT" | "CMD":
                done = any(PurePosixPath(word).name == SCRIPT for word in plain)
            case _:
                done = False
        if not done:
            missed.append(step)
    return missed


def dockerfile_note(folder: Path) -> str:
    """The one line said at start about the folder's Dockerfile: which of its steps evobus
    does not reproduce, and what stands in for them."""
    where = f"evaluator folder {folder}: {SCRIPT} runs in evobus's sandbox, the folder at "
    where += f"{MOUNT_POINT} (read-only)"
    path = folder / DOCKERFILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return f"{where}; no {DOCKERFILE}: nothing else is set up"
    except OSError as exc:
        return f"{where}; its {DOCKERFILE} cannot be read ({exc.strerror})"
    missed = unreproduced_steps(text, folder)
    if not missed:
        return f"{where}; every step of its {DOCKERFILE} is reproduced"
    shown = "; ".join(f"{_short(str(s))} (line {s.line})" for s in missed)
    return (
        f"{where}; of its {DOCKERFILE}, not reproduced: {shown} — the sandbox runs it with "
        f"evobus's interpreter ({sys.executable}) and its packages"
    )


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def folder_mounts(params: Params) -> dict[str, str]:
    """What the evaluation's sandbox must see: the folder at ``/benchmark``, when the work is
    an evaluator folder's and the folder is on this host; {} otherwise."""
    folder = params.get(FOLDER_PARAM)
    if not isinstance(folder, str) or not folder or not os.path.isdir(folder):
        return {}
    return {MOUNT_POINT: folder}


def mode_of(params: Params) -> str:
    """``evaluate.sh``'s mode for an evaluation: ``test`` for validation, else ``train``."""
    return MODES["validation"] if params.get(SPLIT_PARAM) == "validation" else MODES["train"]


def folder_sandbox_files(
    instances: Sequence[str], params: Params, failure_score: float
) -> dict[str, str]:
    """``harness.py`` (folder_harness.py), the module it imports and ``task.json``: the
    instances, the mode, and why the folder is missing on this host, if it is."""
    folder = str(params.get(FOLDER_PARAM, ""))
    missing = ""
    if not os.path.isdir(folder):
        missing = (
            f"the evaluator folder {folder} is not on this evaluator's host: an evaluator on "
            "another host needs the folder at the same path"
        )
    config = {
        "instances": list(instances),
        "failure_score": failure_score,
        "mode": mode_of(params),
        "missing": missing,
    }
    return {
        HARNESS_FILE: package_source(FOLDER_HARNESS_FILE),
        CANDIDATE_PROCESS_FILE: package_source(CANDIDATE_PROCESS_FILE),
        CONFIG_FILE: json.dumps(config, indent=2) + "\n",
    }
