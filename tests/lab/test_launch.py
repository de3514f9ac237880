"""launch.launch's process handling, with a stand-in trainer command (a Python loop that prints
lines): what is tested is the call's handling of the child, not verl."""

import os
import sys

import pytest

from xrpo_verl.lab import launch


def test_a_caller_that_stops_following_kills_the_trainer(tmp_path, monkeypatch):
    pid_file = tmp_path / "pid"
    trainer = (
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n    print('step', flush=True)\n    time.sleep(0.05)\n"
    )
    monkeypatch.setattr(launch, "trainer_command", lambda run, recipe, extra: [sys.executable, "-c", trainer])
    monkeypatch.setattr(launch, "load_recipe", lambda name: None)
    seen = []

    def on_line(line: str) -> None:
        seen.append(line)
        if len(seen) == 3:
            raise RuntimeError("the caller gave up")

    run = launch.CpuRun("model", "train.parquet", "val.parquet", str(tmp_path / "run"))
    with pytest.raises(RuntimeError, match="gave up"):
        launch.launch(run, "grpo", timeout_s=120, on_line=on_line)
    assert len(seen) == 3
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(int(pid_file.read_text()), 0)
    assert (tmp_path / "run" / "trainer.log").read_text() == "step\n" * 3
