"""Running verl on CPU: platform shims, the `hf` rollout backend, the tiny model, the demo."""
