"""Per-lesson checks: ``check_<exercise>(fn)`` raise AssertionError with a hint (see feedback.py)."""
