"""Rows in length order inside each mini-batch, so that no long row widens the short ones.

With `use_remove_padding=False` verl pads every micro-batch to its longest row, and cuts
micro-batches as consecutive slices of a mini-batch, mini-batches as consecutive slices of each
data-parallel rank's share of the step (`engine_workers.py`, `TrainingWorker.train_mini_batch`;
`engine/utils.py`, `prepare_micro_batches`). One ICL prompt or guided row therefore pads every
row of its micro-batch to its own width. Let the step's rows be r_1..r_N with lengths ℓ_i, split
into mini-batches M_1..M_K of m rows each (m = ppo_mini_batch_size · n / dp), and each mini-batch
into micro-batches of u rows:

    padded positions        P = Σ_micro-batches u · max_{i ∈ micro} ℓ_i
    padding share           1 − Σ_i ℓ_i / P

Sorting the rows of each M_k by ℓ keeps every mini-batch's set of rows, hence its gradient: verl's
token-mean loss divides each micro-batch's token sum by the mini-batch's token count
(`transformer_impl.py`, `forward_backward_batch`: `batch_num_tokens`), so the accumulated
gradient is the one-micro-batch gradient up to float summation order. It minimises P for the
given u, and long rows share a micro-batch with each other only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

MICRO_BATCHES_ENV = "XRPO_MICRO_BATCHES"


def sorted_within_blocks(lengths: Sequence[int], block: int) -> list[int]:
    """Order of the rows that sorts each consecutive block of `block` rows by length.

    lengths: (N,) tokens of each row, N a multiple of `block`. Returns a permutation `order` of
    range(N) (new position j holds old row order[j]) that maps every block onto itself; ties keep
    their order (a stable sort).
    """
    n = len(lengths)
    if block < 1 or n % block:
        raise ValueError(f"{n} rows cannot be cut into blocks of {block}")
    order: list[int] = []
    for start in range(0, n, block):
        order += sorted(range(start, start + block), key=lambda i: lengths[i])
    return order


def padded_positions(lengths: Sequence[int], micro: int) -> int:
    """P: positions of the padded micro-batches of `micro` consecutive rows (the last may be short)."""
    if micro < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {micro}")
    return sum(len(chunk) * max(chunk) for chunk in (lengths[s : s + micro] for s in range(0, len(lengths), micro)))


def padding_share(lengths: Sequence[int], micro: int) -> float:
    """1 − Σ ℓ_i / P: the share of the actor's padded positions that are padding."""
    if not lengths:
        return 0.0
    return 1.0 - sum(lengths) / padded_positions(lengths, micro)


# What one more micro-batch costs the actor (its forward and backward calls), in padded positions
# of the tiny CPU models: measured by cutting one step into more micro-batches and comparing the
# added time with what a padded position costs (RESULTS.md, "Step cost").
MICRO_BATCH_CALL_POSITIONS = 128


def padded_cuts(lengths: Sequence[int], max_rows: int, call_cost: int = MICRO_BATCH_CALL_POSITIONS) -> list[range]:
    """The rows, in their order, cut into micro-batches of at most `max_rows` that minimise

        P + call_cost · (number of micro-batches),   P = Σ_micro |micro| · max_{i ∈ micro} ℓ_i

    by dynamic programming over the cut points (O(N · max_rows)); of equal costs the fewest
    micro-batches win. Cutting every `max_rows` rows (verl's fixed micro-batches) is one of the
    candidates, so the result never pads more for as many calls. On rows sorted by length, one or
    two long rows get a micro-batch of their own instead of widening fourteen short ones.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows = {max_rows} must be >= 1")
    n = len(lengths)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the first j rows
    start = [0] * (n + 1)  # start[j]: where the last micro-batch of best[j] begins
    for j in range(1, n + 1):
        widest = 0
        for i in range(j - 1, max(0, j - max_rows) - 1, -1):  # the last micro-batch is rows i..j-1
            widest = max(widest, lengths[i])
            cost = best[i] + (j - i) * widest + call_cost
            if cost < best[j]:
                best[j], start[j] = cost, i
    cuts, j = [], n
    while j > 0:
        cuts.append(range(start[j], j))
        j = start[j]
    return cuts[::-1]


def cut_by_padding(prepare_micro_batches):
    """verl's `prepare_micro_batches` (workers/engine/utils.py), with fixed-size micro-batches of
    padded rows cut by `padded_cuts` instead (at most `micro_batch_size_per_gpu` rows each);
    `XRPO_MICRO_BATCHES=fixed` in the environment keeps verl's cut (for comparisons).

    Only where it keeps the gradient and the collectives: one data-parallel rank, no dynamic batch
    size, no forced groups or pipeline splits; otherwise verl's own cut. The micro-batches are
    consecutive runs in the mini-batch's order, so outputs concatenate back in order (no
    indices), and verl's loss divides by the mini-batch's tokens (`batch_num_tokens`) whatever
    the cut.
    """
    import torch.distributed as dist
    from verl.utils import tensordict_utils as tu

    def prepare(data, dp_group=None, num_batches_divided_by=None, same_micro_num_in_dp=True, **kwargs):
        verl_cut = (
            os.environ.get(MICRO_BATCHES_ENV, "padded") == "fixed"
            or tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True)
            or tu.get_non_tensor_data(data=data, key="force_group_size", default=1) != 1
            or num_batches_divided_by is not None
            or kwargs.get("min_num_micro_batch") is not None
            or (dist.is_initialized() and dist.get_world_size(dp_group) > 1)
        )
        if verl_cut:
            return prepare_micro_batches(data, dp_group, num_batches_divided_by, same_micro_num_in_dp, **kwargs)
        input_ids = data["input_ids"]
        if input_ids.is_nested:
            lengths = input_ids.offsets().diff().tolist()
        else:
            lengths = data["attention_mask"].sum(dim=1).tolist()
        cuts = padded_cuts(lengths, int(data["micro_batch_size_per_gpu"]))
        return [tu.index_select_tensor_dict(data, list(cut)) for cut in cuts], None

    prepare._xrpo_padded_cuts = True
    return prepare
