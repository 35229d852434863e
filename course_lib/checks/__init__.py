"""Per-lesson checks: ``check_<exercise>(fn)`` raise AssertionError with a hint (see feedback.py).

One module per lesson's exercises: ``ex00``, ``ex01``, ``ex02``, ``ex03``, ``ex04``, ``ex05`` (its loop in ``ex05_loop``),
``ex06``, ``ex06b``, ``ex07``, ``ex08``, ``ex09``, ``ex10``, ``ex11``, ``ex12``, ``ex13``, ``ex14``."""
