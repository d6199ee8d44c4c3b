"""Write the golden files from tests/samples.py. Run only when a schema change is intended:
old golden files must keep decoding (schemas only grow: new fields last, with defaults)."""

from __future__ import annotations

from pathlib import Path

from bus import codec
from tests.samples import SAMPLES

if __name__ == "__main__":
    here = Path(__file__).parent
    for name, message in SAMPLES.items():
        (here / f"{name}.msgpack").write_bytes(codec.encode(message))
        print(f"wrote {name}.msgpack")
