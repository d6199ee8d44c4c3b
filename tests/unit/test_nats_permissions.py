"""The per-role NATS permissions, the committed nats.conf, credentials from the environment, and
URLs scrubbed of passwords."""

from __future__ import annotations

from pathlib import Path

import pytest

from evobus.bus import subjects
from evobus.bus.connection import Credentials, credentials_from_env, redact_url, tls_from_env
from evobus.bus.errors import ConnectError
from evobus.bus.permissions import (
    REGISTRY_OPS,
    ROLE_STAGES,
    STEERER,
    SUPERVISOR,
    USERS,
    VIEWER,
    nats_authorization,
    nats_config,
    new_password,
    password_variable,
    permissions,
    role_credentials,
    role_environment,
)
from evobus.schemas.work import STAGES

DEPLOY_CONF = Path(__file__).parent.parent.parent / "infra" / "deploy" / "nats.conf"


def test_the_committed_nats_conf_holds_exactly_the_generated_authorization() -> None:
    committed = DEPLOY_CONF.read_text()
    block = nats_authorization()
    start = committed.index("# Generated from bus/subjects.py")
    assert committed[start:] == block, "regenerate it: see the comment above the block"
    assert committed.count("authorization {") == 1


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://evaluator:s3cret@host:4222", "nats://evaluator:***@host:4222"),
        ("tls://u:p%40ss@10.0.0.1:4222", "tls://u:***@10.0.0.1:4222"),
        ("nats://t0ken@host:4222", "nats://***@host:4222"),
        ("nats://host:4222", "nats://host:4222"),
        ("nats://a:x@h1:4222,nats://b:y@h2:4222", "nats://a:***@h1:4222,nats://b:***@h2:4222"),
    ],
)
def test_urls_lose_their_secrets_before_they_are_shown(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_connect_error_never_carries_the_password() -> None:
    error = ConnectError(redact_url("nats://actor:hunter2@h:1"), "refused")
    assert "hunter2" not in str(error) and "actor:***@h:1" in str(error)


def test_credentials_come_from_the_environment_and_never_show_a_secret() -> None:
    creds = credentials_from_env({"NATS_USER": "critic", "NATS_PASSWORD": "hunter2"})
    assert creds.options() == {"user": "critic", "password": "hunter2"}
    assert "hunter2" not in repr(creds) and "critic" in repr(creds)
    assert credentials_from_env({"NATS_TOKEN": "tok"}).options() == {"token": "tok"}
    assert credentials_from_env({"NATS_CREDS": "/k/a.creds", "NATS_USER": "x"}).options() == {
        "user_credentials": "/k/a.creds"
    }
    assert credentials_from_env({"NATS_NKEY_SEED": "/k/seed"}).options() == {
        "nkeys_seed": "/k/seed"
    }
    assert credentials_from_env({}).options() == {} and Credentials().describe() == "none"


def test_tls_comes_from_the_environment(tmp_path: Path) -> None:
    assert tls_from_env({}) is None and tls_from_env({"NATS_CA": ""}) is None
    with pytest.raises(ConnectError, match="NATS_CERT and NATS_KEY"):
        tls_from_env({"NATS_CERT": str(tmp_path / "c.pem")})
    with pytest.raises(ConnectError, match="cannot load"):
        tls_from_env({"NATS_CA": str(tmp_path / "missing.pem")})


def test_a_child_gets_only_its_own_password() -> None:
    env = {
        "PATH": "/bin",
        "NATS_TOKEN": "old",
        password_variable("evaluator"): "pe",
        password_variable("tool-generator"): "pt",
        password_variable("supervisor"): "ps",
    }
    child = role_environment("tool-generator", env)
    assert child["NATS_USER"] == "tool-generator" and child["NATS_PASSWORD"] == "pt"
    assert "NATS_TOKEN" not in child and child["PATH"] == "/bin"
    assert not [k for k in child if k.startswith("EVOBUS_") and k.endswith("_PASSWORD")]
    # No password for this role: the environment's own credentials stay, others' go.
    critic = role_environment("critic", env)
    assert critic["NATS_TOKEN"] == "old" and "NATS_USER" not in critic
    assert password_variable("evaluator") not in critic
    assert password_variable("tool-generator") == "EVOBUS_TOOL_GENERATOR_PASSWORD"
    assert role_credentials("supervisor", env) == Credentials(user="supervisor", password="ps")
    assert role_credentials("viewer", env) is None


def test_new_passwords_stay_strings_in_a_nats_config() -> None:
    password = new_password()
    assert password[0].isalpha() and password.isalnum() and len(password) > 40


def test_every_stage_is_served_by_one_role() -> None:
    served = [stage for stages in ROLE_STAGES.values() for stage in stages]
    assert sorted(served) == sorted(STAGES)


@pytest.mark.parametrize("role", sorted(ROLE_STAGES))
def test_a_worker_publishes_only_its_own_stages(role: str) -> None:
    allowed = permissions(role)
    mine = set(ROLE_STAGES[role])  # type: ignore[index]
    for stage in STAGES:
        assert (subjects.stage_results(stage) in allowed.publish) == (stage in mine)
    evo = [s for s in allowed.publish if s.startswith(f"{subjects.PREFIX}.")]
    assert subjects.all_work() not in evo
    # The workers targets: watched (an ordered consumer on their bucket), never written.
    targets = subjects.kv_stream(subjects.KV_CONTROL)
    assert subjects.js_api("CONSUMER", "CREATE", targets) in allowed.publish
    assert not any(s.startswith("$KV.") for s in allowed.publish)
    assert subjects.js_api("STREAM", "CREATE", targets) not in allowed.publish
    assert subjects.heartbeats_of(role) in evo
    assert not any(s.startswith("$JS.API.STREAM.CREATE.EVO_") for s in allowed.publish)
    assert not any(".DELETE." in s for s in allowed.publish)
    assert [s for s in allowed.subscribe if s.startswith("_INBOX")] == [subjects.inboxes_of(role)]


def test_only_the_registry_answers_requests_and_only_the_viewer_publishes_nothing() -> None:
    assert [u for u in USERS if permissions(u).allow_responses] == ["registry"]
    assert permissions("registry").subscribe[0] == subjects.all_registry_ops()
    viewer = permissions(VIEWER)
    assert not [s for s in viewer.publish if not s.startswith(("$JS.API.", "$JS.FC."))]
    changes = ("STREAM.CREATE", "STREAM.UPDATE", "PURGE", "DELETE")
    assert not [s for s in viewer.publish if any(v in s for v in changes)]
    for user, ops in REGISTRY_OPS.items():
        assert {subjects.registry(op) for op in ops} <= set(permissions(user).publish)


def test_only_the_steerer_and_the_supervisor_may_steer() -> None:
    may = [u for u in USERS if subjects.all_steering() in permissions(u).publish]
    assert may == [SUPERVISOR, STEERER]
    steerer = permissions(STEERER)
    mine = [s for s in steerer.publish if not s.startswith(("$JS.API.", "$JS.FC."))]
    assert mine == [subjects.all_steering()]  # nothing else: no work, results or events
    changes = ("STREAM.CREATE", "STREAM.UPDATE", "PURGE", "DELETE")
    assert not [s for s in steerer.publish if any(v in s for v in changes)]
    # A worker's results never cover the steering subject: it is no stage's.
    assert subjects.STEERING_STAGE not in STAGES
    assert subjects.is_steering(subjects.steering("c1"))
    assert not subjects.is_steering(subjects.result("c1", "evaluate"))


def test_the_full_config_has_jetstream_the_users_and_a_tls_example() -> None:
    text = nats_config(store_dir="/var/lib/nats")
    assert 'store_dir: "/var/lib/nats"' in text and "jetstream {" in text
    assert "# tls {" in text and "verify: true" in text
    assert text.endswith(nats_authorization())
    for user in USERS:
        assert f"password: ${password_variable(user)}" in text
    with pytest.raises(ValueError, match="no NATS user"):
        nats_authorization(["root"])
