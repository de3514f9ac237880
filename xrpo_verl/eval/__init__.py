"""Evaluation: `python -m xrpo_verl.eval --model PATH --bench aime2024 ...` (see __main__.py)."""
