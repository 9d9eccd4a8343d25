"""Side-by-side benchmarks of vsqs against the syscall floor and its peers.

Run ``python -m benchmarks.run --quick`` (or ``make bench-quick``); see ``benchmarks/run.py``.
Nothing here is imported by ``vsqs`` and nothing here is a test: the numbers are reported,
never asserted.
"""
