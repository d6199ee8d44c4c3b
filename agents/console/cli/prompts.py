"""``evobus prompts``: list, show or set the prompt resources in the registry."""

from __future__ import annotations

import argparse
from pathlib import Path

from evobus.agents.runtime.errors import AgentError
from evobus.bus.connection import connect, url_from_env


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``prompts`` to the subcommands ``sub``."""
    prompts = sub.add_parser(
        "prompts", help="list, show or set the prompt resources (versioned in the registry)"
    )
    prompts.add_argument("action", choices=("list", "show", "set"))
    prompts.add_argument("name", nargs="?", help="prompt name (show, set): e.g. actor.m_diag")
    prompts.add_argument("file", nargs="?", type=Path, help="set: the new user template")
    prompts.add_argument("--system", type=Path, help="set: a new system message from a file")
    prompts.add_argument("--nats", help="NATS URL (default: $NATS_URL)")


async def command(args: argparse.Namespace) -> int:
    from evobus.agents.prompts import BUILT_IN, PromptBook, UnknownPrompt
    from evobus.agents.registry_api.client import RegistryClient

    url = url_from_env(args.nats)
    if url is None:
        raise AgentError(
            "evobus prompts needs a bus with a registry: --nats URL or $NATS_URL. A finished "
            "`evobus run` stopped its embedded server: `evobus serve --out runs` starts it "
            "again (on runs/.nats, with the registry on runs/.registry) and prints NATS_URL"
        )
    if args.action != "list" and not args.name:
        raise AgentError(f"evobus prompts {args.action} needs a prompt name")
    if args.action == "set" and args.file is None:
        raise AgentError("evobus prompts set needs NAME FILE (the new user template)")
    nc = await connect(url, name="evobus-prompts")
    try:
        registry = RegistryClient(nc)
        book = PromptBook(registry, ttl=0.0)
        if args.action == "list":
            registered = {r.name: r for r in await registry.list("prompt")}
            for name in sorted(set(BUILT_IN) | set(registered)):
                prompt = await book.get(name)
                about = registered[name].description if name in registered else ""
                print(f"{prompt.ref:<28} {about or BUILT_IN[name].description}")
            return 0
        try:
            prompt = await book.get(args.name)
        except UnknownPrompt as exc:
            raise AgentError(str(exc)) from None
        if args.action == "show":
            print(f"# {prompt.ref}\n## system\n{prompt.system}\n## user\n{prompt.user}")
            return 0
        try:
            system = args.system.read_text() if args.system else prompt.system
            user = args.file.read_text()
        except OSError as exc:
            raise AgentError(f"cannot read {exc.filename}: {exc.strerror}") from None
        resource = await registry.register(
            "prompt",
            prompt.name,
            description=BUILT_IN[prompt.name].description if prompt.name in BUILT_IN else "",
            source=user,
            metadata={"system": system},
        )
        print(f"{resource.name}@v{resource.version} registered; agents use it within 30 s")
        return 0
    finally:
        await nc.drain()
