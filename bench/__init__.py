"""Benchmarks: each a module of its own, run as python -m bench.NAME; python -m bench lists them.

They sit above every other package (tests/test_layers.py), so that each may use what it times, the Python
API included; bench.common is what they share, bench.passes and bench.pass_bytes what several time or model.
"""
