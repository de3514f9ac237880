"""The toy lab: tiny models, tasks and settings on which verl's real trainer runs on CPU.

- `tiny_model.py`: the tiny Qwen2 models, built from a seed and cached (shipped ones in `assets/`);
- the tasks, each its problems, data and scorer: `arith.py`, `addition.py` (column addition),
  `code_task.py` (short stdin programs judged in the sandbox);
- the settings, a model with a run's sizes (`setting.py`, their shared fields):
  `learning_setting.py` (the addition task on which GRPO learns), `testbed.py` (the premise
  testbed), `code_rl.py` (code RL with sandbox rewards);
- `launch.py` runs a CPU recipe (`recipes/`) through verl's `main_ppo`; `demo.py` is `make demo`;
- `cli.py`: `python -m xrpo_verl.lab demo|train|build|pack`.

Runs launched from here switch the CPU platform on (`xrpo_verl.cpu`), which never imports the lab.
"""
