"""Test doubles shared by the whole suite (importable as ``fakes``: pytest puts ``tests/`` on the path)."""
