"""Judges: grader.py judges a submission on a backend (or hands it to a judge-level transport); scoring.py
grades one test from its run, whatever ran it; classify.py and compare.py hold the rules."""
