"""A built wheel, installed outside the checkout, carries what the demo and the plugin need.

The CPU recipes, the Hydra config and the sandbox's image files are package data; before they
were, the demo found `recipes/` through the source tree and a wheel install could not run it.
The fresh environment sees the dependencies of this one (torch, verl, ...) through a .pth file,
but not the checkout: the editable install's finder is not loaded there.
"""

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, subprocess, sys
from pathlib import Path
import xrpo_verl, sandbox
from xrpo_verl.lab import launch
from xrpo_verl.verl_adapters.config import CONFIG_DIR
import verl
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
recipes = sorted(p.stem for p in launch.RECIPE_DIR.glob("[!_]*.yaml"))
demo = subprocess.run([sys.executable, "-m", "xrpo_verl.lab", "demo", "--help"], capture_output=True, text=True)
print(json.dumps({
    "package": xrpo_verl.__file__, "sandbox": sandbox.__file__, "recipes": recipes,
    "xrpo_extra_config": launch.load_recipe("xrpo_extra")["config_name"],
    "hydra_yaml": (Path(CONFIG_DIR) / "xrpo_trainer.yaml").is_file(),
    "dockerfile": (Path(sandbox.__file__).parent / "docker" / "Dockerfile").is_file(),
    "runner": (Path(sandbox.__file__).parent / "runner.py").is_file(),
    "estimators": sorted(k for k in ADV_ESTIMATOR_REGISTRY if k in ("xrpo", "extra", "xrpo_extra")),
    "demo_help": demo.returncode == 0 and "--steps" in demo.stdout,
}))
"""


@pytest.mark.slow  # a fresh interpreter or a model build
def test_wheel_installed_elsewhere_runs_the_demo_entry_and_registers(tmp_path):
    # pip builds a local directory in place: build from a copy, so the checkout gets no build/.
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns(".git", ".venv*", "build", "outputs", "__pycache__", "*.egg-info")
    shutil.copytree(ROOT, src, ignore=ignore)
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            tmp_path / "dist",
            src,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=src,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("xrpo_verl-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True, timeout=120)
    fresh_python = tmp_path / "venv" / "bin" / "python"
    site = Path(
        subprocess.run(
            [fresh_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, wheel],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    (site / "_deps_from_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    out = subprocess.run([fresh_python, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["package"].startswith(str(site)) and seen["sandbox"].startswith(str(site))
    assert {"grpo", "xrpo", "extra", "xrpo_extra"} <= set(seen["recipes"])
    assert seen["xrpo_extra_config"] == "xrpo_trainer"
    assert seen["hydra_yaml"] and seen["dockerfile"] and seen["runner"]
    assert seen["estimators"] == ["extra", "xrpo", "xrpo_extra"]
    assert seen["demo_help"]
