"""Reward scorers (pure) and the verl reward-loop manager."""
