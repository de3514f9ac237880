"""Thin adapters between verl 0.9.1 and the pure algorithm modules."""
