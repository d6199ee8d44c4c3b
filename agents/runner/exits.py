"""The exit statuses of evobus's commands, and the one place errors become them."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable

import anyio

from evobus.agents.registry_api.errors import RegistryError
from evobus.agents.runtime.errors import AgentError, CampaignFailed
from evobus.bus.errors import BusError
from evobus.infra.errors import InfraError
from evobus.schemas.errors import SchemaError

EXIT_CONFIG = 2  # the user's input: a bad campaign file, a seed that fails on every instance
EXIT_FAILED = 1
EXIT_TERMINATED = 128 + 15  # SIGTERM's, as a shell reports a process it ended

Command = Callable[[argparse.Namespace], Awaitable[int]]


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run ``command`` on ``args`` under anyio; its exit status, an error said on stderr as
    ``evobus: …`` with the status its kind gets (the process boundary: nothing else catches)."""
    try:
        return anyio.run(command, args)
    except (SchemaError, ValueError) as exc:
        print(f"evobus: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except CampaignFailed as exc:
        print(f"evobus: {exc}", file=sys.stderr)
        return EXIT_CONFIG if exc.seed_failed else EXIT_FAILED
    except (AgentError, BusError, InfraError, RegistryError) as exc:
        print(f"evobus: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("evobus: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `evobus trace … | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
