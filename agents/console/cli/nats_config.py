"""``evobus nats-config``: a nats-server config with one user per role."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evobus.agents.runtime.errors import AgentError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``nats-config`` to the subcommands ``sub``."""
    nats_config = sub.add_parser(
        "nats-config",
        help="print a nats-server config with one user per role (permissions from the subjects)",
    )
    nats_config.add_argument("--out", type=Path, help="write it to this file instead")
    nats_config.add_argument(
        "--store-dir", default="/data", help="JetStream's store_dir in the config"
    )
    nats_config.add_argument(
        "--passwords",
        action="store_true",
        help="print fresh EVOBUS_<USER>_PASSWORD=... lines (an env file) instead",
    )


async def command(args: argparse.Namespace) -> int:
    from evobus.bus.permissions import USERS, nats_config, new_password, password_variable

    if args.passwords:
        text = "".join(f"{password_variable(user)}={new_password()}\n" for user in USERS)
    else:
        text = nats_config(store_dir=args.store_dir)
    if args.out is None:
        print(text, end="")
        return 0
    try:
        args.out.touch(mode=0o600)  # passwords, or where they are named: not for every reader
        args.out.write_text(text)
    except OSError as exc:
        raise AgentError(f"cannot write {args.out}: {exc.strerror}") from None
    if not args.passwords:
        needed = " ".join(password_variable(user) for user in USERS)
        print(f"{args.out}: nats-server needs these variables set: {needed}", file=sys.stderr)
    return 0
