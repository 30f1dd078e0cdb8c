"""Offline, deterministic offers (the ``builtin`` transport): a rules decider and an extractive summarizer."""
