"""Campaign files, mutated: every bad one fails with a CampaignConfigError that names the key at
fault, never with a bare msgspec, Type, Key or Unicode error.

The mutations start from examples/pendulum.toml (read with tomllib, written back by the small
TOML writer below): a leaf of the wrong type, out of its range or huge, an unknown key at any
level, a required key deleted; and text or bytes that are no TOML at all.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evobus.schemas.campaign import CampaignSpec, load_campaign, parse_campaign
from evobus.schemas.errors import CampaignConfigError

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "pendulum.toml"
BASE: dict[str, Any] = tomllib.loads(EXAMPLE.read_text())

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---- a TOML writer, enough for what the mutations make ----

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    # fullmatch: `$` would also match before a final newline ("0\n" is no bare key)
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(text: str) -> str:
    # JSON's escapes are TOML's (json.dumps writes no \/, and no surrogate pairs without
    # ensure_ascii); control characters come out as \uXXXX, but for DEL, which TOML refuses raw.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def toml_dumps(document: dict[str, Any]) -> str:
    lines: list[str] = []

    def table(path: tuple[str, ...], values: dict[str, Any]) -> None:
        if path:
            lines.append("[" + ".".join(toml_key(k) for k in path) + "]")
        subtables = {k: v for k, v in values.items() if isinstance(v, dict) and v}
        for key, value in values.items():
            if key not in subtables:
                lines.append(f"{toml_key(key)} = {toml_value(value)}")
        for key, value in subtables.items():
            table((*path, key), value)

    table((), document)
    return "\n".join(lines) + "\n"


def test_the_writer_round_trips_the_example() -> None:
    assert tomllib.loads(toml_dumps(BASE)) == BASE
    assert parse_campaign(toml_dumps(BASE)) == parse_campaign(EXAMPLE.read_bytes())


# ---- the schema's leaves, with their types ----


def _struct_fields(info: mi.Type) -> dict[str, mi.Type]:
    assert isinstance(info, mi.StructType)
    return {f.name: f.type for f in info.fields}


def schema_leaves(info: mi.Type, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], mi.Type]:
    """Every key of a campaign file (tables included), with its type."""
    found: dict[tuple[str, ...], mi.Type] = {}
    for name, kind in _struct_fields(info).items():
        found[(*prefix, name)] = kind
        if isinstance(kind, mi.StructType):
            found.update(schema_leaves(kind, (*prefix, name)))
    return found


LEAVES = schema_leaves(mi.type_info(CampaignSpec))
SCALARS = {p: t for p, t in LEAVES.items() if not isinstance(t, mi.StructType)}
TABLES = [p for p, t in LEAVES.items() if isinstance(t, mi.StructType)]


def set_at(document: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``document`` with ``path`` set to ``value`` (missing tables created)."""
    head, rest = path[0], path[1:]
    if not rest:
        return {**document, head: value}
    inner = document.get(head, {})
    assert isinstance(inner, dict)
    return {**document, head: set_at(inner, rest, value)}


def delete_at(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    head, rest = path[0], path[1:]
    if not rest:
        return {k: v for k, v in document.items() if k != head}
    return {**document, head: delete_at(document[head], rest)}


def dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def assert_names(error: CampaignConfigError, path: tuple[str, ...]) -> None:
    """The error names ``path``: as its key (or an item of it), and in its message."""
    key = dotted(path)
    assert error.key == key or error.key.startswith((f"{key}.", f"{key}[")), (key, str(error))
    assert f"key '{key}" in str(error)


def check_fails_naming(document: dict[str, Any], path: tuple[str, ...]) -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign(toml_dumps(document), path="fuzz.toml")
    assert_names(info.value, path)
    assert str(info.value).startswith("fuzz.toml: ")


# ---- values by kind ----

TEXT = st.text(max_size=30)
ANY_SCALAR = st.one_of(
    TEXT,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.datetimes(timezones=st.just(dt.UTC)),
)
COMPOUND = st.one_of(
    st.lists(ANY_SCALAR, min_size=1, max_size=3),
    st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), ANY_SCALAR, max_size=3),
)


def wrong_type_values(kind: mi.Type) -> st.SearchStrategy[Any]:
    """Values ``kind`` can never take: no int where a float goes (msgspec takes it), no
    table where a struct goes."""
    non_integral = st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda x: not x.is_integer()
    )
    dates = st.datetimes(timezones=st.just(dt.UTC))
    lists = st.lists(ANY_SCALAR, min_size=1, max_size=3)
    tables = st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), ANY_SCALAR, max_size=3)
    if isinstance(kind, mi.UnionType):  # an optional key (budget.target_score): TOML has no None
        [inner] = [t for t in kind.types if not isinstance(t, mi.NoneType)]
        return wrong_type_values(inner)
    if isinstance(kind, mi.IntType):
        return st.one_of(TEXT, st.booleans(), non_integral, dates, lists, tables)
    if isinstance(kind, mi.FloatType):
        return st.one_of(TEXT, st.booleans(), dates, lists, tables)
    if isinstance(kind, mi.BoolType):
        return st.one_of(TEXT, st.integers(), st.floats(allow_nan=False), dates, lists, tables)
    if isinstance(kind, mi.StrType | mi.LiteralType):
        return st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), dates, lists)
    if isinstance(kind, mi.StructType | mi.DictType):
        return st.one_of(TEXT, st.integers(), st.floats(allow_nan=False), st.booleans(), lists)
    assert isinstance(kind, mi.VarTupleType)  # llm.base_urls and the like
    return st.one_of(TEXT, st.integers(), st.booleans(), tables)


def finite_floats(
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    exclude_min: bool = False,
    exclude_max: bool = False,
) -> st.SearchStrategy[float]:
    return st.floats(
        min_value=min_value,
        max_value=max_value,
        exclude_min=exclude_min,
        exclude_max=exclude_max,
        allow_nan=False,
        allow_infinity=False,
    )


def out_of_range_values(kind: mi.Type) -> st.SearchStrategy[Any] | None:
    """Values of the right type outside ``kind``'s constraints; None when it has none."""
    options: list[st.SearchStrategy[Any]] = []
    if isinstance(kind, mi.IntType):
        if kind.ge is not None:
            options.append(st.integers(max_value=kind.ge - 1, min_value=kind.ge - 10**6))
        if kind.gt is not None:
            options.append(st.integers(max_value=kind.gt, min_value=kind.gt - 10**6))
        if kind.le is not None:
            options.append(st.integers(min_value=kind.le + 1, max_value=kind.le + 10**6))
        if kind.lt is not None:
            options.append(st.integers(min_value=kind.lt, max_value=kind.lt + 10**6))
    if isinstance(kind, mi.FloatType):
        if kind.ge is not None:
            options.append(finite_floats(max_value=kind.ge, exclude_max=True))
        if kind.gt is not None:
            options.append(finite_floats(max_value=kind.gt))
        if kind.le is not None:
            options.append(finite_floats(min_value=kind.le, exclude_min=True))
        if kind.lt is not None:
            options.append(finite_floats(min_value=kind.lt))
    if isinstance(kind, mi.LiteralType):
        options.append(TEXT.filter(lambda text: text not in kind.values))
    if isinstance(kind, mi.StrType) and kind.pattern is not None:
        pattern = re.compile(kind.pattern)
        options.append(TEXT.filter(lambda text: not pattern.search(text)))
    if isinstance(kind, mi.VarTupleType):
        if kind.min_length:
            options.append(st.just([]))
        item = kind.item_type
        if isinstance(item, mi.StrType) and item.pattern is not None:
            item_pattern = re.compile(item.pattern)
            options.append(st.lists(TEXT.filter(lambda t: not item_pattern.search(t)), min_size=1))
    return st.one_of(*options) if options else None


RANGED = {p: s for p, t in SCALARS.items() if (s := out_of_range_values(t)) is not None}


def huge_values(kind: mi.Type) -> st.SearchStrategy[Any]:
    """Values too big for any key: integers beyond 64 bits, inf and nan, deep arrays."""
    deep = st.integers(min_value=2, max_value=60).map(lambda depth: _nested(depth))
    return st.one_of(
        st.integers(min_value=2**63, max_value=2**200),
        st.integers(min_value=-(2**200), max_value=-(2**63) - 1),
        st.sampled_from([math.inf, -math.inf, math.nan]),
        deep,
    )


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# ---- the properties ----


@FUZZ
@given(data=st.data())
def test_a_value_of_the_wrong_type_names_its_key(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted(LEAVES)))
    value = data.draw(wrong_type_values(LEAVES[path]))
    check_fails_naming(set_at(BASE, path, value), path)


@FUZZ
@given(data=st.data())
def test_a_value_out_of_range_names_its_key(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted(RANGED)))
    value = data.draw(RANGED[path])
    check_fails_naming(set_at(BASE, path, value), path)


@FUZZ
@given(data=st.data())
def test_a_huge_value_names_its_key(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted(SCALARS)))
    value = data.draw(huge_values(SCALARS[path]))
    check_fails_naming(set_at(BASE, path, value), path)


@settings(FUZZ, max_examples=40)
@given(data=st.data(), size=st.integers(min_value=10_000, max_value=2_000_000))
def test_a_huge_string_is_taken_or_names_its_key(data: st.DataObject, size: int) -> None:
    path = data.draw(st.sampled_from(sorted(SCALARS)))
    try:
        parse_campaign(toml_dumps(set_at(BASE, path, "é" * size)), path="fuzz.toml")
    except CampaignConfigError as exc:
        assert_names(exc, path)
        assert len(str(exc)) < 2000  # the value is not quoted whole


@FUZZ
@given(data=st.data())
def test_an_unknown_key_names_itself(data: st.DataObject) -> None:
    table = data.draw(st.sampled_from([(), *TABLES]))
    known = {p[-1] for p in LEAVES if p[:-1] == table}
    name = data.draw(st.text(min_size=1, max_size=20).filter(lambda n: n not in known))
    value = data.draw(ANY_SCALAR | COMPOUND)
    check_fails_naming(set_at(BASE, (*table, name), value), (*table, name))


@pytest.mark.parametrize("path", [("campaign",), ("campaign", "task")])
def test_a_missing_required_key_names_it(path: tuple[str, ...]) -> None:
    check_fails_naming(delete_at(BASE, path), path)


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_deleting_optional_keys_keeps_the_file_valid(data: st.DataObject) -> None:
    present = [
        p for p in LEAVES if _has(BASE, p) and p not in {("campaign",), ("campaign", "task")}
    ]
    document = BASE
    for path in data.draw(st.lists(st.sampled_from(present), max_size=6, unique=True)):
        if _has(document, path):
            document = delete_at(document, path)
    parse_campaign(toml_dumps(document))


def _has(document: Any, path: tuple[str, ...]) -> bool:
    for step in path:
        if not isinstance(document, dict) or step not in document:
            return False
        document = document[step]
    return True


def _only_config_errors(data: bytes | str) -> None:
    try:
        parse_campaign(data, path="fuzz.toml")
    except CampaignConfigError as exc:
        assert str(exc).startswith("fuzz.toml: ")


@FUZZ
@given(text=st.text(max_size=300))
def test_random_text(text: str) -> None:
    _only_config_errors(text)


@FUZZ
@given(data=st.data())
def test_the_example_with_random_edits(data: st.DataObject) -> None:
    text = EXAMPLE.read_text()
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        at = data.draw(st.integers(min_value=0, max_value=len(text)))
        cut = data.draw(st.integers(min_value=0, max_value=5))
        text = text[:at] + data.draw(st.text(max_size=5)) + text[at + cut :]
    _only_config_errors(text)


@settings(FUZZ, max_examples=60)
@given(data=st.binary(max_size=300))
def test_random_bytes_from_a_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "campaign.toml"
        path.write_bytes(data)
        try:
            load_campaign(path)
        except CampaignConfigError as exc:
            assert exc.path == str(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # found: UnicodeDecodeError, RecursionError; a lone surrogate no file can hold
        (b'[campaign]\ntask = "p"\xff\n', "not valid UTF-8 at byte 21"),
        ('[campaign]\ntask = "p"\nx = ' + "[" * 5000 + "]" * 5000, "nested too deeply"),
        ('[campaign]\ntask = "\ud800"\n', "not valid TOML: surrogates"),
    ],
)
def test_files_that_do_not_parse_are_whole_file_errors(text: bytes | str, says: str) -> None:
    with pytest.raises(CampaignConfigError, match=re.escape(says)) as info:
        parse_campaign(text)
    assert info.value.key == ""


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        # found: the entry of a table of stage targets was shown as `strategy.workers[...]`
        ("[strategy.workers]\npropose = 0\n", "strategy.workers.propose", ">= 1"),
        ('[strategy.workers]\nevaluate = 2\nrepair = "x"\n', "strategy.workers.repair", "int"),
        # found: a backtick or a newline in an unknown key cut the key from the error
        ('[strategy]\n"a`b" = 1\n', "strategy.a`b", "unknown field"),
        ('[strategy]\n"a\\nb" = 1\n', "strategy.a\nb", "unknown field"),
        # found: taken, then failed later (msgpack has no int over 64 bits; inf never ends)
        ("[task]\nepisode_seed = 100000000000000000000000\n", "task.episode_seed", "64 bits"),
        ("[campaign.budget]\nwall_seconds = inf\n", "campaign.budget.wall_seconds", "finite"),
        ("[strategy]\nucb_beta = inf\n", "strategy.ucb_beta", "finite"),
        # found: taken, then failed in the embedder or the sandbox's rlimits
        ("[embedder]\ndim = 0\n", "embedder.dim", ">= 1"),
        ("[embedder]\ndim = 10000000000\n", "embedder.dim", "<= 65536"),
        ("[sandbox]\nmemory_mb = 9000000000000000\n", "sandbox.memory_mb", "<= 1048576"),
    ],
)
def test_keys_the_fuzzing_found_unnamed_or_unchecked(text: str, key: str, says: str) -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign('[campaign]\ntask = "pendulum"\n' + text)
    assert info.value.key == key and says in info.value.reason, str(info.value)


def test_the_error_of_a_huge_value_is_short() -> None:
    with pytest.raises(CampaignConfigError) as info:
        parse_campaign('[campaign]\ntask = "p"\n[task]\nmetric = "' + "x" * 100_000 + '"\n')
    assert info.value.key == "task.metric" and "expected one of 'exact'" in info.value.reason
    assert len(str(info.value)) < 1000
