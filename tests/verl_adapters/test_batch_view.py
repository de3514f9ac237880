"""A verified success is the scorer's verdict, never a positive score (issue 25's partial credit).

The score forms below are what our reward manager writes (`rewards/manager.py`,
`tests/rewards/test_manager.py` for the overlong penalty): a code program passing 1 of 4 tests
under `reward_mode=fraction`, DAPO's +1/-1 rewards, and a correct answer with an overlong penalty.
"""

import torch

from xrpo_verl.verl_adapters.batch_view import BatchView

# (sequence reward written on the last token, the scorer's acc, a verified success?)
ROWS = [
    (0.25, 0.0, False),  # fraction: 1 of 4 tests passed
    (1.0, 1.0, True),  # fraction: every test passed
    (-1.0, 0.0, False),  # DAPO: wrong
    (1.0, 1.0, True),  # DAPO: right
    (0.5, 1.0, True),  # right, minus an overlong penalty of 0.5
    (-0.5, 0.0, False),  # wrong, and overlong
]


def _view(rows, valid=None):
    B = len(rows)
    rm = torch.zeros(B, 3)
    rm[:, 2] = torch.tensor([r[0] for r in rows])
    return BatchView(
        uids=["u"] * B,
        keys=["k"] * B,
        kinds=["base"] * B,
        raw_prompts=[None] * B,
        responses=[torch.arange(3)] * B,
        prompts=None,
        entropy=None,
        mask=torch.ones(B, 3),
        rm_scores=rm,
        old_log_probs=torch.zeros(B, 3),
        valid=torch.ones(B, dtype=torch.bool) if valid is None else valid,
        acc=torch.tensor([r[1] for r in rows]),
    )


def test_correct_is_the_verdict_not_the_sign_of_the_score():
    view = _view(ROWS)
    assert view.correct.tolist() == [r[2] for r in ROWS]
    assert view.scores.tolist() == [r[0] for r in ROWS]  # the score itself is kept for the advantage
    # the rule "score > 0" would call the partial program a success and the penalised answer one too
    assert (view.scores > 0).tolist() != view.correct.tolist()


def test_padding_rows_are_never_correct():
    view = _view(ROWS[:2], valid=torch.tensor([True, False]))
    assert view.correct.tolist() == [False, False]
