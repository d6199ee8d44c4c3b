"""A process starting on a host of the test cluster (tests/cluster/test_majority.py).

``python wait_client.py URL,URL,URL``: connects with every server's URL, runs ``ensure_streams``
(which first waits for JetStream to answer), prints ``{"ensured": true}`` and exits. Its
warnings go to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from evobus.bus.connection import connect
from evobus.bus.streams import ensure_streams


async def main(urls: str) -> None:
    """Make sure of the streams, as every evobus process does first."""
    nc = await connect(urls, name="wait-client")
    try:
        await ensure_streams(nc.jetstream())
    finally:
        await nc.close()
    print(json.dumps({"ensured": True}), flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(sys.argv[1]))
