"""Judges: compile, run every test through a backend session, compare, and give verdicts."""
