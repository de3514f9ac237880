"""Dataset converters to verl parquet (`python -m xrpo_verl.data --help`).

schema.py (row layout, prompt families), sources.py (local files / hub), math_sets.py,
code_sets.py (LiveCodeBench, Codeforces), fixtures.py (offline pip-package data).
"""
