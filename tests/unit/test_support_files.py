"""The files an evaluator file uses from its folder (schemas/support_files.py): found from its
text, read at submission, refused with the reason when they cannot travel, and written beside
the evaluator in the sandbox."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from evobus.agents.runner.supervisor import support_note
from evobus.agents.tasks.evaluator_files import FILES_PARAM, EvaluatorFilesTask
from evobus.schemas import support_files as support
from evobus.schemas.campaign import TaskSection, parse_campaign, with_program_files
from evobus.schemas.errors import CampaignConfigError
from evobus.schemas.support_files import MAX_SUPPORT_BYTES, support_files

EVALUATOR = """\
import os
import helper
from shapes.square import side
from numpy import mean

DATA = os.path.join(os.path.dirname(__file__), "data/points.csv")

def evaluate(program_path):
    with open("weights.txt") as f:
        return {"combined_score": float(f.read()) + helper.bonus()}
"""


HELPER = 'import tables\n\ndef bonus():\n    return len(open("extra.bin", "rb").read())\n'


def write(folder: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def test_what_the_evaluator_imports_and_names_beside_it_is_taken_and_nothing_else(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "evaluator.py": EVALUATOR,
            "helper.py": HELPER,
            "tables.py": "ROWS = 3\n",  # imported by the helper: found through it
            "extra.bin": b"\x00\xff\x01",
            "shapes/__init__.py": "",
            "shapes/square.py": "def side():\n    return 1\n",
            "shapes/__pycache__/square.cpython-311.pyc": b"cache",
            "data/points.csv": "1,2\n",
            "data/.hidden": "secret",
            "weights.txt": "0.5",
            "unrelated.py": "X = 1\n",  # nothing names it
            "initial_program.py": "def run():\n    return 1\n",
            "runs/c1/events.jsonl": "{}\n",
        },
    )
    found = support_files(tmp_path / "evaluator.py", leave_out=[tmp_path / "initial_program.py"])
    files = found.files
    assert found.left_out == {} and found.note("evaluator.py") == ""
    assert sorted(files) == [
        "data/points.csv",
        "extra.bin",
        "helper.py",
        "shapes/__init__.py",
        "shapes/square.py",
        "tables.py",
        "weights.txt",
    ]
    assert files["extra.bin"] == b"\x00\xff\x01"


def test_paths_that_leave_the_folder_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not the evaluator's")
    folder = tmp_path / "problem"
    folder.mkdir()
    (folder / "link.txt").symlink_to(outside)
    code = 'A = "../secret.txt"\nB = "link.txt"\nC = "/etc/hostname"\nD = ".."\nE = "../gone.csv"\n'
    write(folder, {"evaluator.py": code})
    found = support_files(folder / "evaluator.py")
    assert found.files == {}
    # What it names outside its folder is said (the sandbox will not have it), when it exists.
    assert found.left_out == {
        "../secret.txt": "outside the evaluator's folder",
        "link.txt": "outside the evaluator's folder",
    }


def test_what_does_not_fit_is_left_out_and_said_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name may match by chance (a dict key that is also a folder of old results): the run
    # goes on with what fits, and says what stays behind.
    monkeypatch.setattr(support, "MAX_TREE_FILES", 5)
    half = MAX_SUPPORT_BYTES // 2
    write(
        tmp_path,
        {
            "evaluator.py": 'A = "small.txt"\nB = "big.npy"\nC = "results"\nD = "fits.bin"\n',
            "small.txt": "1",
            "big.npy": b"\x00" * (MAX_SUPPORT_BYTES + 1),
            "fits.bin": b"\x01" * half,
            **{f"results/run{n}.json": "{}" for n in range(6)},
        },
    )
    found = support_files(tmp_path / "evaluator.py")
    assert sorted(found.files) == ["fits.bin", "small.txt"]
    assert found.left_out == {
        "big.npy": "193 KiB, past the 192 KiB that travel with each evaluation",
        "results/": "more than 5 files",
    }
    assert found.note("evaluator.py").startswith(
        "evaluator.py names files that do not go with it into the sandbox: "
        "results/ (more than 5 files), big.npy (193 KiB, past the 192 KiB that travel with"
    )


def test_a_campaign_carries_them_and_the_sandbox_holds_them_beside_the_evaluator(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "evaluator.py": EVALUATOR,
            "helper.py": "def bonus():\n    return 0\n",
            "weights.txt": "0.5",
            # The program beside the evaluator imports a module of the folder too: a candidate
            # runs beside the evaluator, with the same imports.
            "initial_program.py": "from geometry import unit\ndef run():\n    return unit()\n",
            "geometry.py": "def unit():\n    return 1\n",
        },
    )
    raw = b'[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator.py"\n'
    spec = with_program_files(parse_campaign(raw, path="c.toml"), tmp_path, "c.toml")
    assert spec.task.evaluator_files == {
        "geometry.py": b"def unit():\n    return 1\n",
        "helper.py": b"def bonus():\n    return 0\n",
        "weights.txt": b"0.5",
    }
    task = EvaluatorFilesTask()
    params = task.task_params(spec.task)
    assert json.loads(str(params[FILES_PARAM]))["weights.txt"] == base64.b64encode(b"0.5").decode()
    files = task.sandbox_files(("0",), params)
    assert files["weights.txt"] == b"0.5" and files["helper.py"] == b"def bonus():\n    return 0\n"
    assert files["evaluator.py"] == EVALUATOR


def test_a_file_named_like_the_sandboxs_own_is_refused(tmp_path: Path) -> None:
    section = TaskSection(
        evaluator_source="import harness\ndef evaluate(p):\n    return {}\n",
        evaluator_files={"harness.py": b"X = 1\n"},
    )
    with pytest.raises(CampaignConfigError, match=r"uses harness\.py beside it.*rename it"):
        EvaluatorFilesTask().task_params(section)


def test_a_campaign_file_cannot_set_them(tmp_path: Path) -> None:
    raw = b'[campaign]\nevaluator = "e.py"\n[task]\nevaluator_files = {}\n'
    with pytest.raises(CampaignConfigError, match=r"task\.evaluator_files"):
        parse_campaign(raw, path="c.toml")


def test_evobus_run_names_what_stays_behind(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "evaluator.py": 'DATA = "huge.bin"\ndef evaluate(p):\n    return {}\n',
            "huge.bin": b"\x00" * (MAX_SUPPORT_BYTES + 1),
            "initial_program.py": "def run():\n    return 1\n",
        },
    )
    raw = b'[campaign]\nprogram = "initial_program.py"\nevaluator = "evaluator.py"\n'
    spec = with_program_files(parse_campaign(raw, path="c.toml"), tmp_path, "c.toml")
    assert spec.task.evaluator_files == {}
    assert support_note(spec).startswith(
        "evaluator.py names files that do not go with it into the sandbox: huge.bin (193 KiB"
    )
