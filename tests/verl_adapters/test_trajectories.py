"""TransferQueue's layout as the trainer reads it: keys, rewards back, and no rollout invented.

TransferQueue itself is replaced by a dict of stored rows (the e2e runs in tests/e2e/ read the
real one); what is tested is the reading: which keys belong to which group, and what happens
when a group comes back short."""

from types import SimpleNamespace

import pytest
import torch
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from xrpo_verl.verl_adapters import trajectories as T


class FakeQueue:
    """uid -> prompt status, key -> summed reward; the calls TransferQueue answers for the trainer."""

    def __init__(self, status: dict[str, str], rewards: dict[str, float]):
        self.status, self.rewards = status, rewards

    def kv_list(self, partition):
        items = {u: {"is_prompt": True, "status": s} for u, s in self.status.items()}
        items |= {k: {"status": "success"} for k in self.rewards}
        return {partition: items}

    def kv_batch_get(self, keys, partition_id, select_fields):
        assert select_fields == ["rm_scores", "extra_fields"]
        infos = [{"reward_extra_info": {"acc": float(self.rewards[k] >= 1)}} for k in keys]
        return {"rm_scores": torch.tensor([[0.0, self.rewards[k]] for k in keys]), "extra_fields": infos}


def test_keys_round_trip():
    assert T.parse_trajectory_key(T.trajectory_key("0f3a-9c", 12, 1)) == ("0f3a-9c", 12, 1)


def test_ledger_gives_session_offsets_and_reads_rewards_in_session_order(monkeypatch):
    ledger = T.RolloutLedger()
    assert ledger.reserve("a", 2) == 0 and ledger.reserve("b", 2) == 0
    assert ledger.reserve("a", 3) == 2  # round 1 continues a's sessions
    queue = FakeQueue(
        {"a": "finished", "b": "finished"},
        {"a_4_0": 1.0, "a_0_0": 0.0, "a_1_0": 1.0, "a_3_0": 0.0, "a_2_0": 1.0, "b_1_0": 0.5, "b_0_0": 0.0},
    )
    monkeypatch.setattr(T, "tq", queue)
    got = ledger.outcomes(["a", "b"])
    assert {u: [o.reward for o in got[u]] for u in got} == {"a": [0.0, 1.0, 1.0, 0.0, 1.0], "b": [0.0, 0.5]}
    assert [o.success for o in got["b"]] == [False, False]  # 0.5 is partial credit, not a success


def test_a_group_back_short_is_an_error_never_a_made_up_reward(monkeypatch):
    ledger = T.RolloutLedger()
    ledger.reserve("a", 3)
    monkeypatch.setattr(T, "tq", FakeQueue({"a": "finished"}, {"a_0_0": 1.0, "a_2_0": 0.0}))
    with pytest.raises(T.LostRollouts, match=r"3 rollouts submitted, 2 in TransferQueue \(missing sessions \[1\]"):
        ledger.outcomes(["a"])


def test_a_failed_group_stops_the_wait(monkeypatch):
    monkeypatch.setattr(T, "tq", FakeQueue({"a": "finished", "b": "failure"}, {}))
    with pytest.raises(T.LostRollouts, match="failed in the agent loop"):
        T.wait_terminal({"a", "b"}, timeout_s=5)


def test_reward_infos_read_from_transfer_queue_rows(monkeypatch):
    """reward_extra_info sits where verl's agent loop stores it: TransferQueue's `extra_fields`
    column, built by verl's own list_of_dict_to_tensordict."""
    infos = [
        {"verdict": "AC", "attempts": 1, "sandbox_s": 0.5, "sandbox_start": 1.0, "sandbox_end": 1.5},
        {"verdict": "WA", "attempts": 2, "sandbox_s": 0.5, "sandbox_start": 1.25, "sandbox_end": 2.0},
        {"verdict": "", "attempts": 0, "sandbox_s": 0.0, "sandbox_start": 0.0, "sandbox_end": 0.0},
    ]
    # the agent loop's timings, as verl's AgentLoopMetrics dumps them; the second row's lack one
    timings = [{"generate_sequences": 0.75, "tool_calls": 0.0}, {"tool_calls": 0.0}, {"generate_sequences": 1.0}]
    stored = list_of_dict_to_tensordict(
        [
            {"extra_fields": {"reward_extra_info": i, "min_global_steps": 1}, "metrics": t}
            for i, t in zip(infos, timings, strict=True)
        ]
    )

    def kv_batch_get(keys, partition_id, select_fields):
        assert select_fields == ["extra_fields", "metrics"] and partition_id == "train" and keys == ["a", "b", "c"]
        return stored

    monkeypatch.setattr(T, "tq", SimpleNamespace(kv_batch_get=kv_batch_get))
    batch = SimpleNamespace(keys=["a", "b", "c"], partition_id="train", tags=[{}, {}, {"is_padding": True}])
    # the padding row is left out; generation time is added where the agent loop recorded it
    assert T.reward_infos(batch) == [{**infos[0], "generate_s": 0.75}, infos[1]]


def test_in_flight_counts_rollouts_submitted_and_not_back(monkeypatch):
    ledger = T.RolloutLedger()
    ledger.reserve("a", 4)
    ledger.reserve("b", 2)
    in_flight = T.InFlight(ledger)
    monkeypatch.setattr(T, "tq", FakeQueue({"a": "running", "b": "running"}, {"a_0_0": 1.0}))
    in_flight.sample(T.listing({"a", "b"}))  # 6 submitted, 1 back
    monkeypatch.setattr(T, "tq", FakeQueue({"a": "finished", "b": "running"}, {f"a_{i}_0": 1.0 for i in range(4)}))
    in_flight.sample(T.listing({"a", "b"}))  # a's 4 back: b's 2 in flight
    assert in_flight.samples == [5, 2]
    assert in_flight.metrics() == {
        "xrpo/gen/in_flight_mean": 3.5,
        "xrpo/gen/in_flight_peak": 5.0,
        "xrpo/gen/occupancy": 0.7,
    }


def test_terminal_returns_finished_groups_and_raises_on_a_failed_one(monkeypatch):
    monkeypatch.setattr(T, "tq", FakeQueue({"a": "finished", "b": "running"}, {}))
    assert T.terminal({"a", "b"}, T.listing({"a", "b"})) == {"a"}
    monkeypatch.setattr(T, "tq", FakeQueue({"a": "finished", "b": "failure"}, {}))
    with pytest.raises(T.LostRollouts, match="1 prompt groups"):
        T.terminal({"a", "b"}, T.listing({"a", "b"}))


def test_poll_delay_is_a_bounded_share_of_the_wait():
    assert T.poll_delay(0.0) == T.POLL_MIN_S  # a fresh wait polls finely
    assert T.poll_delay(1.0) == pytest.approx(T.POLL_LATENESS * 1.0)  # at most that share late
    assert T.poll_delay(1e4) == T.POLL_MAX_S  # a long GPU round does not list the partition often
    delays = [T.poll_delay(t / 10) for t in range(100)]
    assert delays == sorted(delays)


def test_a_wait_notices_the_last_group_within_its_poll_delay(monkeypatch):
    """On a simulated clock, a group finishing 0.5 s into the wait is seen within POLL_LATENESS of
    that (a fixed 0.2 s period would see it at 0.6 s)."""
    clock = SimpleNamespace(now=0.0, polls=0)

    class LateQueue(FakeQueue):
        def kv_list(self, partition):
            clock.polls += 1
            self.status = {"a": "finished" if clock.now >= 0.5 else "running"}
            return super().kv_list(partition)

    monkeypatch.setattr(T.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(T.time, "sleep", lambda s: setattr(clock, "now", clock.now + s))
    monkeypatch.setattr(T, "tq", LateQueue({"a": "running"}, {}))
    T.wait_terminal({"a"}, timeout_s=5)
    assert 0.5 <= clock.now <= 0.5 * (1 + T.POLL_LATENESS)
    assert clock.polls < 100  # and not a busy loop
