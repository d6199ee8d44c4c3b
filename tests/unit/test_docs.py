"""The README and docs/ say only what is true: every fenced block is checked or run, and the
reference pages stay in step with the code they describe.

Blocks, by the first word of their info string:

- ``toml``: a campaign file, or part of one (``[campaign] task`` is added when it has none),
  parsed by ``parse_campaign``; ``toml file=pyproject.toml`` is a package's pyproject instead.
- ``python``: compiled, and run in a fresh namespace from the repository root; ``python no-run``
  and ``python file=PATH`` (a file of a package example) are only compiled and must name the test
  that runs them.
- ``sh`` / ``console`` (``$ `` lines in a console block): every ``evobus`` command line parses with
  the real argparse and the files it reads exist; ``make`` targets exist; cheap commands
  (``--help``, ``--version``, ``nats-config``) run and show what the block shows; everything else
  must name the test that runs it.
- ``json``: parses. ``text``: free (diagrams, output).

A comment on the line above a block says who runs it: ``<!-- run by: tests/…py::test_x, … -->``
(each test must exist), or, in docs/measured.md only, ``<!-- measured by hand: … -->``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import math
import re
import shlex
import sys
import tomllib
from pathlib import Path

import anyio
import msgspec
import msgspec.inspect
import pytest

from evobus.agents.console.cli import build_parser, main
from evobus.agents.console.cli.run import _workers
from evobus.agents.tasks import BUILTIN_TASKS, Task
from evobus.infra.llm_sim.script import load_rules
from evobus.infra.sandbox import available_isolation, run_sandboxed
from evobus.schemas.campaign import (
    CampaignSpec,
    SandboxSection,
    TaskSection,
    load_campaign,
    parse_campaign,
)
from tests.markdown_blocks import (
    ROOT,
    Block,
    anchors,
    bench_module,
    commands,
    evobus_argv,
    prose,
    read_blocks,
)

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = (README, *sorted(DOCS.glob("*.md")))
LANGUAGES = ("toml", "python", "sh", "console", "json", "text")
REPO_DIRS = ("agents", "bus", "schemas", "infra", "examples", "tests", "docs", "evobus")
BLOCKS = [block for page in PAGES for block in read_blocks(page)]


def blocks_of(*langs: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang in langs]


def block_id(block: Block) -> str:
    return block.id


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_block_has_a_known_language_and_no_fence_is_indented() -> None:
    assert BLOCKS
    unknown = [b.id for b in BLOCKS if b.lang not in LANGUAGES]
    assert not unknown, f"blocks need one of {LANGUAGES} as info string: {unknown}"
    indented = [
        f"{page.relative_to(ROOT)}:{n}"
        for page in PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if line.lstrip().startswith("```") and not line.startswith("```")
    ]
    assert not indented, f"indented fences escape the checks: {indented}"


def test_the_tests_a_block_names_exist() -> None:
    for block in BLOCKS:
        if block.says("run by:"):
            assert block.run_by, f"{block.id}: `run by:` names no tests/…py::test_name"
        for file, name in block.run_by:
            path = ROOT / file
            assert path.is_file(), f"{block.id}: no test file {file}"
            source = path.read_text(encoding="utf-8")
            assert re.search(rf"^(async )?def {name}\(", source, re.M), (
                f"{block.id}: {file} has no test {name}"
            )
        if block.by_hand:
            assert block.page == DOCS / "measured.md", f"{block.id}: only measurements by hand"


# ---- toml ----


@pytest.mark.parametrize("block", blocks_of("toml"), ids=block_id)
def test_toml_blocks_are_valid_campaigns_or_pyprojects(block: Block) -> None:
    raw = tomllib.loads(block.text)
    if block.flag("file") == "pyproject.toml":
        assert raw["build-system"]["build-backend"]
        assert raw["project"]["name"] and raw["project"]["version"]
        tasks = raw["project"]["entry-points"]["evobus.tasks"]
        assert all(re.fullmatch(r"[\w.]+:\w+", target) for target in tasks.values()), tasks
        return
    text = block.text if "campaign" in raw else f'[campaign]\ntask = "pendulum"\n{block.text}'
    parse_campaign(text, path=block.id)


# ---- python ----


@pytest.mark.parametrize("block", blocks_of("python"), ids=block_id)
def test_python_blocks_compile_and_run(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    # Top-level ``await`` and ``async with`` as in a notebook: such blocks are not run here.
    code = compile(block.text, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if "no-run" in block.flags or block.flag("file"):
        assert block.run_by, f"{block.id}: a block not run here names its test (run by:)"
        return
    monkeypatch.chdir(ROOT)
    exec(code, {"__name__": "__docs__"})


def test_the_task_plugin_example_scores_its_seed_in_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/tasks.md's ``sqrt`` package, written out as its blocks say, is a Task whose harness
    scores the seed on every instance in the sandbox, as the evaluator runs it."""
    if available_isolation() == "none":
        pytest.skip("no sandbox isolation works on this host")
    files = {
        name: b.text
        for b in BLOCKS
        if b.page == DOCS / "tasks.md" and (name := b.flag("file")) is not None
    }
    assert {"pyproject.toml", "evobus_sqrt/__init__.py", "evobus_sqrt/harness.py"} <= set(files)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    entry = tomllib.loads(files["pyproject.toml"])["project"]["entry-points"]["evobus.tasks"]
    module_name, _, attr = entry["sqrt"].partition(":")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = __import__(module_name)
        task = getattr(module, attr)()
    finally:
        sys.modules.pop(module_name, None)
    assert isinstance(task, Task) and task.name == "sqrt"

    params = TaskSection()
    instances = task.instances(params, "validation")
    assert len(instances) == params.validation_episodes
    assert not set(instances) & set(task.instances(params, "train"))
    sandbox = dict(task.sandbox_files(instances, task.task_params(params)))
    sandbox["candidate.py"] = task.seed_artifact().source
    run = anyio.run(run_sandboxed, sandbox, ["harness.py"], SandboxSection())
    assert run.failure() == "", run.stderr.decode(errors="replace")
    scores = task.parse_output(run.stdout, instances)
    assert [s.instance for s in scores] == list(instances)
    assert all(task.failure_score < s.score <= 0 and not s.error for s in scores), scores
    assert min(s.score for s in scores) < -0.01  # two Newton steps from 1.0: not yet there


# ---- sh / console ----


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([\w-]+):", text, re.M))


def parse_evobus(argv: tuple[str, ...], where: str) -> argparse.Namespace:
    """``argv`` through the real parser; a parse error fails with argparse's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: `evobus {shlex.join(argv)}` does not parse: {err.getvalue()}")


def check_files_read(args: argparse.Namespace, created: set[str], where: str) -> None:
    """The files an evobus command reads exist in the repository (or earlier in the block)."""
    reads: list[Path] = []
    if args.command == "run":
        names = ("campaign", "program", "evaluator")
        reads += [p for p in (getattr(args, name, None) for name in names) if p is not None]
    if args.command == "llm-sim" and args.script is not None:
        reads.append(args.script)
        load_rules(ROOT / args.script)
    if args.command == "prompts":
        reads += [p for p in (args.file, args.system) if p is not None]
    for path in reads:
        # An evaluator may be a folder (SkyDiscover's protocol: agents/tasks/evaluator_folder.py).
        folder = path == getattr(args, "evaluator", None) and (ROOT / path).is_dir()
        assert str(path) in created or (ROOT / path).is_file() or folder, f"{where}: no file {path}"
    if args.command == "run" and getattr(args, "campaign", None) is not None:
        load_campaign(ROOT / args.campaign)
    if args.command in ("run", "resume"):
        _workers(args.workers)


def is_cheap(args: argparse.Namespace | None) -> bool:
    """Whether the doc test runs this evobus command itself: ``nats-config`` to standard output
    (``--help`` and ``--version`` run too)."""
    return args is not None and args.command == "nats-config" and args.out is None


def run_evobus(argv: tuple[str, ...], where: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # --help and --version exit through argparse
            code = exc.code if isinstance(exc.code, int) else 1
    assert code == 0, f"{where}: `evobus {shlex.join(argv)}` exited {code}"
    return out.getvalue()


def repo_paths(words: tuple[str, ...]) -> list[str]:
    """Words that name a file or folder of this repository (no placeholders)."""
    return [
        w.rstrip(",.;:")
        for w in words
        if w.split("/")[0] in REPO_DIRS and "/" in w and not re.search(r"[<>…*$]", w)
    ]


@pytest.mark.parametrize("block", blocks_of("sh", "console"), ids=block_id)
def test_command_lines_parse_and_name_files_that_exist(block: Block) -> None:
    found = commands(block)
    assert found, f"{block.id}: no command in a {block.lang} block"
    created: set[str] = set()
    not_run: list[str] = []
    for command in found:
        where = f"{block.id} `{shlex.join(command.argv)}`"
        created.update(command.writes)
        argv = evobus_argv(command.argv)
        if argv is not None:
            helps = bool({"--help", "-h", "--version"} & set(argv))
            args = None if helps else parse_evobus(argv, where)
            if args is not None:
                check_files_read(args, created, where)
            if helps or is_cheap(args):
                output = run_evobus(argv, where)
                for line in command.shown:
                    assert line.strip() in output, f"{where}: prints no {line.strip()!r}"
            else:
                not_run.append(shlex.join(command.argv))
            continue
        bench = bench_module(command.argv)
        if bench is not None:
            assert bench.is_file(), f"{where}: no module {bench.relative_to(ROOT)}"
            source = bench.read_text(encoding="utf-8")
            for option in (w for w in command.argv if w.startswith("--")):
                assert f'"{option}"' in source, f"{where}: {bench.name} has no {option}"
            not_run.append(shlex.join(command.argv))
            continue
        if command.argv[:1] == ("make",):
            targets = make_targets()
            assert set(command.argv[1:]) <= targets, f"{where}: Makefile targets are {targets}"
            continue
        for path in repo_paths(command.argv):
            assert path in created or (ROOT / path).exists(), f"{where}: no {path}"
    if not_run:
        assert block.run_by or block.by_hand, (
            f"{block.id}: name the test that runs {not_run} (<!-- run by: tests/…::test -->)"
        )


def test_the_makefile_runs_commands_that_parse() -> None:
    """``make demo``'s recipe (and any other evobus line in the Makefile) parses and names files
    that exist: the README's two set-up commands stay true."""
    recipes = re.findall(r"^\t\$\(BIN\)/evobus (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert recipes
    for recipe in recipes:
        argv = tuple(shlex.split(recipe))
        check_files_read(parse_evobus(argv, "Makefile"), set(), f"Makefile `{recipe}`")


# ---- json ----


@pytest.mark.parametrize("block", blocks_of("json"), ids=block_id)
def test_json_blocks_parse(block: Block) -> None:
    try:
        json.loads(block.text)
    except json.JSONDecodeError:
        for line in filter(str.strip, block.text.splitlines()):
            json.loads(line)


# ---- links and paths in the prose ----


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_relative_links_resolve_inside_the_repository(page: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.is_relative_to(ROOT), f"{page.name}: {target} leaves the repository"
        assert file.exists(), f"{page.name}: {target} does not exist"
        if anchor:
            assert anchor in anchors(file), f"{page.name}: {target}: no such heading"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_repository_paths_in_inline_code_exist(page: Path) -> None:
    text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", text)
    for path in repo_paths(tuple(s for s in spans if " " not in s)):
        assert (ROOT / path).exists(), f"{page.name}: `{path}` does not exist"


# ---- the README ----


def test_the_readme_is_short_and_starts_with_plain_words() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "../" not in text, "the README points only inside the repository"
    setup = next(b for b in BLOCKS if b.page == README and b.lang == "sh")
    assert [c.argv for c in commands(setup)] == [("make", "demo"), ("make", "test")]
    before = text[: text.index("make demo")]
    jargon = ("POLCA", "REFLEX", "FlashEvolve", "A-Evolve", "AGP", "bandit", "ε", "UCB", "m_diag")
    assert not [w for w in jargon if w in before], "paper vocabulary before the commands"


# ---- campaign-files.md against schemas/campaign.py ----


def toml_value(value: object) -> str:
    """How a default reads in a campaign file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    assert isinstance(value, int | float) and math.isfinite(value), value
    return repr(value)


def schema_tables() -> dict[str, dict[str, str]]:
    """Every table of a campaign file: its keys and their defaults as the docs write them."""
    tables: dict[str, dict[str, str]] = {}

    def walk(info: msgspec.inspect.StructType, name: str) -> None:
        keys = tables.setdefault(name, {})
        for field in info.fields:
            if isinstance(field.type, msgspec.inspect.StructType):
                walk(field.type, f"{name}.{field.name}" if name else field.name)
            elif field.required:
                keys[field.name] = "required"
            else:
                default = field.default
                if default is msgspec.NODEFAULT:
                    default = field.default_factory()
                # None has no TOML spelling: the key is left out (e.g. budget.target_score).
                keys[field.name] = "unset" if default is None else f"`{toml_value(default)}`"

    spec = msgspec.inspect.type_info(CampaignSpec)
    assert isinstance(spec, msgspec.inspect.StructType)
    walk(spec, "")
    return {name: keys for name, keys in tables.items() if name}


def documented_tables() -> dict[str, dict[str, str]]:
    """The key tables of docs/campaign-files.md: ``## [table]`` sections, rows key → default."""
    text = (DOCS / "campaign-files.md").read_text(encoding="utf-8")
    tables: dict[str, dict[str, str]] = {}
    for name, body in re.findall(r"^## \[([\w.]+)\]\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", body, re.M)
        tables[name] = {key: default.strip() for key, default in rows}
    return tables


def test_every_campaign_key_is_documented_with_its_default() -> None:
    schema, docs = schema_tables(), documented_tables()
    assert set(docs) == set(schema), "a `## [table]` section per table of CampaignSpec"
    for table, keys in schema.items():
        assert set(docs[table]) == set(keys), (
            f"[{table}]: undocumented {sorted(set(keys) - set(docs[table]))}, "
            f"no such key {sorted(set(docs[table]) - set(keys))}"
        )
        wrong = {k: (docs[table][k], v) for k, v in keys.items() if docs[table][k] != v}
        assert not wrong, f"[{table}] defaults (doc, code): {wrong}"


def test_every_built_in_task_has_a_row() -> None:
    text = (DOCS / "tasks.md").read_text(encoding="utf-8")
    section = text.partition("## Built-in tasks")[2].partition("\n## ")[0]
    rows = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    assert set(BUILTIN_TASKS) <= rows, f"docs/tasks.md lacks {sorted(set(BUILTIN_TASKS) - rows)}"


# ---- commands.md against the parser ----


def leaf_parsers(
    parser: argparse.ArgumentParser, path: str = "evobus"
) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path: parser}
    found: dict[str, argparse.ArgumentParser] = {}
    for action in subs:
        for name, sub in action.choices.items():
            found.update(leaf_parsers(sub, f"{path} {name}"))
    return found


def test_every_command_and_option_is_documented() -> None:
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## (evobus [\w -]+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    parsers = leaf_parsers(build_parser())
    assert set(sections) == set(parsers), "a `## evobus …` section per command"
    for name, parser in parsers.items():
        options = {
            s
            for a in parser._actions
            if not isinstance(a, argparse._HelpAction)
            for s in a.option_strings
            if s.startswith("--")
        }
        body = sections[name]
        usage = re.search(rf"^`{name}( [^`]*)?`$", body, re.M)
        assert usage, f"{name}: no usage line `{name} …`"
        in_usage = set(re.findall(r"--[a-z][a-z-]*", usage.group(0)))
        in_table = set(re.findall(r"^\| `(--[a-z][a-z-]*)", body, re.M))
        assert in_usage == options, f"{name} usage: {sorted(in_usage ^ options)}"
        assert in_table == options, f"{name} table: {sorted(in_table ^ options)}"
