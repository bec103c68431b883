"""Reproducible benchmarks: the store against raw drivers and peer session stores.

Run ``python -m benchmarks`` (full, writes ``benchmarks/RESULTS.md``) or
``python -m benchmarks --quick`` (under two minutes). See ``RESULTS.md`` for what is
measured and how.
"""
