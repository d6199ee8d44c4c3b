"""Write golden files for samples that have none yet. Existing files are never rewritten: they
are the bytes older versions of evobus put on the bus, and they must keep decoding."""

from __future__ import annotations

from pathlib import Path

from evobus.bus import codec
from tests.samples import SAMPLES

if __name__ == "__main__":
    here = Path(__file__).parent
    for name, message in SAMPLES.items():
        path = here / f"{name}.msgpack"
        if not path.exists():
            path.write_bytes(codec.encode(message))
            print(f"wrote {path.name}")
