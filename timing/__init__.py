"""Timing harness: sweeps, statistics and reports."""
