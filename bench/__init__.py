"""Benchmarks: one module per question a user asks, run as python -m bench.NAME; python -m bench lists them.

Each module's docstring opens with its question, then names its committed results and the README or docs line
they back. They sit above every other package (tests/test_layers.py), so that each may use what it times, the
Python API included; bench.common is what they share. A benchmark of a settled question is retired: its
results stay in results/ with the command that made them and the commit it ran at."""
