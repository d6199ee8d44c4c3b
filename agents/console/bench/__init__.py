"""Benchmarks of evobus itself (``evobus bench …``), built on the product's own machinery."""
