"""verl's TransferQueue layout, owned here: trajectory keys, group status, rewards read back.

verl 0.9.1's V1 trainer registers each submitted prompt row under its `uid` (a "prompt" entry
whose tag `status` goes pending -> running -> finished | failure), and its agent-loop workers
put every finished trajectory under `{uid}_{session_id}_{index}` (`agent_loop_tq.py`,
`_agent_loop_postprocess`): `session_id` counts the row's rollouts from 0 (our agent-loop worker
shifts it by the row's `xrpo_session_offset`, so later rounds of a uid never overwrite earlier
ones) and `index` the outputs of one multi-output agent loop. Only this module reads or builds
those keys.

A rollout is never invented: `session_outcomes` returns exactly what TransferQueue holds, and
`check_complete` raises when a group finished with fewer trajectories than were submitted, or
failed, instead of letting a lost rollout pass as a reward.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass

import transfer_queue as tq

from xrpo_verl.rewards.result import is_success

PARTITION = "train"
# A round's wait polls TransferQueue every `poll_delay(elapsed)`: finely at first, so that a short
# CPU round is not rounded up to a fixed period (paid by every round, several a step, where GRPO
# waits once), coarsely in long GPU rounds, where a poll lists the whole partition (B x n entries
# and more at cluster size: the poll count, not the partition, is what this bounds). A round is
# seen done at most POLL_LATENESS of its length late, and never more than POLL_MAX_S.
POLL_MIN_S, POLL_MAX_S, POLL_LATENESS = 0.02, 2.0, 0.05
ROUND_TIMEOUT_S = float(os.environ.get("XRPO_ROUND_TIMEOUT_S", "3600"))
TERMINAL = ("finished", "failure")


class LostRollouts(RuntimeError):
    """A prompt group ended without every rollout it was submitted for."""


def trajectory_key(uid: str, session: int, index: int = 0) -> str:
    return f"{uid}_{session}_{index}"


def parse_trajectory_key(key: str) -> tuple[str, int, int]:
    """`{uid}_{session}_{index}` -> (uid, session, index); uids are uuid4 strings (no `_`)."""
    uid, session, index = key.rsplit("_", 2)
    return uid, int(session), int(index)


@dataclass(frozen=True)
class Listing:
    """One snapshot of the partition: prompt groups' status and trajectory keys per uid."""

    status: dict[str, str]  # uid -> pending | running | finished | failure
    keys: dict[str, list[str]]  # uid -> trajectory keys in TransferQueue


def listing(uids: set[str] | None = None) -> Listing:
    """What TransferQueue holds now for `uids` (all uids when None)."""
    items = (tq.kv_list(PARTITION) or {}).get(PARTITION, {})
    status: dict[str, str] = {}
    keys: dict[str, list[str]] = defaultdict(list)
    for key, tag in items.items():
        if tag.get("is_prompt", False):
            if uids is None or key in uids:
                status[key] = tag.get("status", "pending")
            continue
        uid = key.rsplit("_", 2)[0]
        if uids is None or uid in uids:
            keys[uid].append(key)
    return Listing(status, dict(keys))


def terminal(uids: set[str], seen: Listing) -> set[str]:
    """The groups of `uids` that are done in `seen`; `LostRollouts` if any of them failed."""
    failed = sorted(u for u in uids if seen.status.get(u) == "failure")
    if failed:
        raise LostRollouts(
            f"{len(failed)} prompt groups (e.g. {failed[:3]}) failed in the agent loop; their rollouts "
            "are lost (the rollout worker's log has the error)"
        )
    return {u for u in uids if seen.status.get(u) == "finished"}


def clear_groups(uids: set[str], seen: Listing) -> None:
    """Remove prompt groups and their trajectories from the partition, so the step does not train them."""
    if uids:
        tq.kv_clear(partition_id=PARTITION, keys=[*uids, *(k for u in uids for k in seen.keys.get(u, []))])


def poll_delay(elapsed_s: float) -> float:
    """Seconds to sleep before the next poll of a wait that began `elapsed_s` ago."""
    return min(POLL_MAX_S, max(POLL_MIN_S, POLL_LATENESS * elapsed_s))


def wait_terminal(uids: set[str], timeout_s: float = ROUND_TIMEOUT_S, on_poll=None) -> Listing:
    """Block until every group of `uids` is finished or failed; raise on a failure or a timeout.

    `on_poll(seen)` is called with each snapshot (the trainer samples the rollouts in flight)."""
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        seen = listing(uids)
        if on_poll is not None:
            on_poll(seen)
        waiting = [u for u in uids if seen.status.get(u) not in TERMINAL]
        if not waiting:
            terminal(uids, seen)
            return seen
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(waiting)} prompt groups (e.g. {waiting[:3]}) did not finish within {timeout_s:.0f}s "
                "(XRPO_ROUND_TIMEOUT_S); an agent loop is stuck"
            )
        time.sleep(poll_delay(time.monotonic() - start))


@dataclass(frozen=True)
class Outcome:
    """One rollout as the planner reads it."""

    reward: float  # summed reward R_i
    success: bool  # a verified success: the scorer's acc (rewards/result.py), never a partial score


def session_outcomes(keys: list[str]) -> dict[str, dict[int, Outcome]]:
    """uid -> {session: Outcome} of the given trajectory keys (the last output of a session wins, as
    verl copies the final output's reward onto the earlier ones)."""
    out: dict[str, dict[int, Outcome]] = defaultdict(dict)
    if not keys:
        return out
    data = tq.kv_batch_get(keys=keys, partition_id=PARTITION, select_fields=["rm_scores", "extra_fields"])
    for key, score, extra in zip(keys, list(data["rm_scores"]), list(data["extra_fields"]), strict=True):
        uid, session, _ = parse_trajectory_key(key)
        info = (getattr(extra, "data", extra) or {}).get("reward_extra_info", None) or {}
        if "acc" not in info:
            raise ValueError(
                f"trajectory {key} has no 'acc' in its reward_extra_info (keys {sorted(info)}): the planner counts "
                "a success only from the scorer's verdict (reward.reward_manager.name=xrpo writes it)"
            )
        out[uid][session] = Outcome(float(score.sum().item()), is_success(float(info["acc"])))
    return out


def check_complete(uid: str, sessions: dict, submitted: int) -> None:
    """Raise `LostRollouts` unless `sessions` holds exactly sessions 0..submitted-1 of `uid`."""
    if set(sessions) != set(range(submitted)):
        missing = sorted(set(range(submitted)) - set(sessions))
        extra = sorted(set(sessions) - set(range(submitted)))
        raise LostRollouts(
            f"prompt group {uid}: {submitted} rollouts submitted, {len(sessions)} in TransferQueue "
            f"(missing sessions {missing[:8]}, unexpected {extra[:8]})"
        )


def reward_infos(batch) -> list[dict]:
    """The step's rows' reward_extra_info (verl keeps it in TransferQueue, in `extra_fields`), each
    with `generate_s`, the agent loop's generation time of the row (its `metrics`), where recorded."""
    rows = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
    if not rows:
        return []
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "metrics"])
    extra = [getattr(value, "data", value) for value in data["extra_fields"]]  # as verl's replay_buffer reads it
    timings = [getattr(value, "data", value) for value in data["metrics"]]
    out = []
    for i in rows:
        if not isinstance(extra[i], dict):
            continue
        info = dict(extra[i].get("reward_extra_info", None) or {})
        if isinstance(timings[i], dict) and "generate_sequences" in timings[i]:
            info["generate_s"] = float(timings[i]["generate_sequences"])
        out.append(info)
    return out


class RolloutLedger:
    """n_q of every prompt group in a step: the one count of rollouts submitted per uid.

    Every submission reserves its sessions here (`reserve` gives the session offset of the new
    rollouts); `rewards` reads the rewards back and insists that they are exactly the reserved ones.
    """

    def __init__(self) -> None:
        self.submitted: dict[str, int] = {}

    def reserve(self, uid: str, k: int) -> int:
        """Reserve k more sessions of `uid`; returns the first new session id (the row's offset)."""
        if k < 1:
            raise ValueError(f"cannot reserve {k} rollouts for {uid}")
        offset = self.submitted.get(uid, 0)
        self.submitted[uid] = offset + k
        return offset

    def outcomes(self, uids: list[str], seen: Listing | None = None) -> dict[str, list[Outcome]]:
        """uid -> outcomes of sessions 0..n_q-1, in session order; `LostRollouts` if any is missing."""
        seen = seen or listing(set(uids))
        by_uid = session_outcomes([k for u in uids for k in seen.keys.get(u, [])])
        out = {}
        for u in uids:
            sessions = by_uid.get(u, {})
            check_complete(u, sessions, self.submitted[u])
            out[u] = [sessions[i] for i in range(self.submitted[u])]
        return out


class InFlight:
    """Rollouts submitted but not back, sampled at each poll of a step's generation (the engine's
    occupancy as the trainer sees it: a rollout is back once its trajectory is in TransferQueue)."""

    def __init__(self, ledger: RolloutLedger) -> None:
        self.ledger = ledger
        self.samples: list[int] = []

    def sample(self, seen: Listing) -> None:
        back = sum(len({parse_trajectory_key(k)[1] for k in keys}) for keys in seen.keys.values())
        self.samples.append(sum(self.ledger.submitted.get(u, 0) for u in seen.status) - back)

    def metrics(self) -> dict[str, float]:
        """Mean and peak over the polls; mean / peak is 1 when the engine never drained."""
        peak = max(self.samples, default=0)
        mean = sum(self.samples) / len(self.samples) if self.samples else 0.0
        return {
            "xrpo/gen/in_flight_mean": float(mean),
            "xrpo/gen/in_flight_peak": float(peak),
            "xrpo/gen/occupancy": mean / peak if peak else 0.0,
        }
