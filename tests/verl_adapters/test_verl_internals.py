"""The list of verl's private names we depend on is complete, current, and checked against verl."""

from pathlib import Path

import pytest

from xrpo_verl.verl_adapters import verl_internals as V

ROOT = Path(__file__).resolve().parents[2]


def test_the_pinned_verl_has_every_listed_name():
    V.check_verl()
    assert V.missing_names() == []


def test_a_moved_name_fails_the_start_up_check(monkeypatch):
    monkeypatch.setitem(V.PRIVATE_NAMES, "verl.trainer.ppo.v1.trainer_base:PPOTrainer", {"_gone_in_0_10": "x"})
    with pytest.raises(RuntimeError, match=r"missing verl.trainer.ppo.v1.trainer_base:PPOTrainer._gone_in_0_10"):
        V.check_verl()


def test_each_listed_name_is_used_where_the_list_says():
    for owner, names in V.PRIVATE_NAMES.items():
        for name, where in names.items():
            path = (
                ROOT
                / ("tests" if where.startswith("tests/") else "xrpo_verl")
                / where.split(":")[0].removeprefix("tests/")
            )
            assert path.is_file(), (owner, name, where)
            assert name in path.read_text(), f"{owner}.{name} is listed for {path} but not used there"


def _overridden_private(cls, base) -> set[str]:
    return {n for n in vars(cls) if n.startswith("_") and not n.startswith(("__", "_abc")) and hasattr(base, n)}


def test_every_private_verl_method_our_subclasses_override_is_listed():
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from xrpo_verl.verl_adapters.agent_loops import XrpoAgentLoopWorker
    from xrpo_verl.verl_adapters.trainer import XrpoTrainer

    listed = {n for names in V.PRIVATE_NAMES.values() for n in names}
    assert _overridden_private(XrpoTrainer, PPOTrainer) - listed == set()
    assert _overridden_private(XrpoAgentLoopWorker, AgentLoopWorker) - listed == set()
