"""Per-lesson checks: ``check_<exercise>(fn)`` raise AssertionError with a hint (see testing.py)."""
