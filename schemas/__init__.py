"""msgspec types for every message and record of evobus: pure data, no I/O."""
