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

from collections.abc import Sequence


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
