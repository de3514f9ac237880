"""Start-up errors of the vLLM-on-CPU path (xrpo_verl/cpu/vllm_cpu.py): a wrong environment gets
one line naming the environment to use. Pure checks on given versions and CPU flags; the real
path runs in tests_vllm/ (`make test-vllm`)."""

import pytest

from xrpo_verl.cpu import switches, vllm_cpu
from xrpo_verl.cpu.vllm_cpu import environment_problem

AVX2 = {"sse4_2", "avx", "avx2"}


def test_vllm_path_in_the_hf_environment_names_the_vllm_env():
    line = environment_problem(True, True, None, AVX2)
    assert ".venv-vllm (make vllm-env)" in line and "\n" not in line


def test_vllm_switch_with_a_gpu_build_says_to_unset_it():
    line = environment_problem(True, True, "0.24.0", AVX2)
    assert "GPU build" in line and "unset XRPO_VERL_VLLM_CPU" in line and ".venv-vllm" in line


def test_other_vllm_release_asks_for_a_rebuild():
    assert "target 0.24.0" in environment_problem(True, True, "0.32.0+cpu", AVX2)


def test_cpu_without_avx2_points_to_the_hf_path(monkeypatch):
    monkeypatch.setattr(vllm_cpu.platform, "machine", lambda: "x86_64")
    line = environment_problem(True, True, "0.24.0+cpu", {"sse4_2", "avx"})
    assert "no AVX2" in line and ".venv (make setup)" in line
    assert environment_problem(True, True, "0.24.0+cpu", {"avx512f"}) is None


def test_hf_path_in_the_vllm_environment_names_the_hf_env():
    line = environment_problem(False, True, "0.24.0+cpu", AVX2)
    assert "hf CPU path runs in .venv (make setup)" in line


@pytest.mark.parametrize(
    "vllm_switch,cpu_switch,version",
    [(True, True, "0.24.0+cpu"), (False, True, None), (False, False, "0.24.0"), (False, False, "0.24.0+cpu")],
)
def test_fitting_environments_pass(vllm_switch, cpu_switch, version):
    assert environment_problem(vllm_switch, cpu_switch, version, AVX2) is None


def test_switch_rejects_unclear_values():
    assert switches.vllm_cpu_enabled({}) is False
    assert switches.vllm_cpu_enabled({"XRPO_VERL_VLLM_CPU": "1"}) is True
    with pytest.raises(ValueError, match="expected '1'"):
        switches.vllm_cpu_enabled({"XRPO_VERL_VLLM_CPU": "yes"})
