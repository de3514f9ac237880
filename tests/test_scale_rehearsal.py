"""benchmarks/scale_rehearsal.py at a tiny size: it runs the plugin's per-step code against a real
TransferQueue and writes every figure the issue asks for (the figures themselves are RESULTS')."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_the_rehearsal_writes_its_summary(tmp_path):
    out = tmp_path / "rehearsal.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "scale_rehearsal.py"), "--prompts", "8", "--rollouts", "4"]
    cmd += ["--response-tokens", "256", "--dataset-prompts", "24", "--steps", "4", "--save-every", "2"]
    cmd += ["--selection", "history", "--json", str(out)]
    # its states go under TMPDIR, this test's own folder (Ray's sockets stay under a short path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0", "TMPDIR": str(tmp_path)}
    env.setdefault("RAY_TMPDIR", "/tmp")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    s = json.loads(out.read_text())
    for key in ("plugin_s_p50", "plugin_s_max", "rss_gb_peak", "state_mb", "state_save_s", "tq_calls_per_step"):
        assert s[key] > 0, key
    assert len(s["rss_gb_by_step"]) == 4 and len(s["state_mb_by_save"]) == 2
    assert s["encoder_texts_per_step"] > 0 and s["tq_listing_ms"] > 0
    # 24 prompts, 3 x 8 candidates a step: by step 4 every prompt has been a candidate
    assert s["per_step"][-1]["rows"] == 8 * 4  # B x n rows: the planner spent GRPO's budget
    assert s["plugin_s_max"] >= s["plugin_s_p50"]
    assert not list(tmp_path.glob("xrpo-rehearsal-*")), "the saved states outlived the run"
