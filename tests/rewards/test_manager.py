"""The `xrpo` reward-loop manager, driven through verl's own classes.

Real parts: verl's registry and `load_reward_manager`, `DataProto`, `assemble_rm_scores`, a
byte-level BPE tokenizer trained here (no hub), and the real math scorer. Code rows here stop
before the sandbox (no code block); judging through the manager is in test_code_reward.py.
"""

import asyncio
import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from xrpo_verl.rewards.manager import XrpoRewardManager, overlong_reward, parse_reward_kwargs

PROMPT_LEN, RESPONSE_LEN = 8, 24


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [f"The answer is \\boxed{{{i}}} because {i} + {i} = {2 * i}." for i in range(200)]
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<eos>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def make_config(**reward_kwargs):
    return OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {"path": None, "name": "compute_score"},
                "reward_manager": {"source": "register", "name": "xrpo", "module": {"path": None}},
                "sandbox_fusion": {"url": None},
                "reward_kwargs": reward_kwargs,
            }
        }
    )


def make_batch(tokenizer, rows):
    """rows: (response_text, data_source, ground_truth, extra_info); left-padded prompts, right-padded responses."""
    from verl import DataProto

    prompts, responses, masks = [], [], []
    for text, *_ in rows:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        assert len(ids) <= RESPONSE_LEN, f"test response too long: {len(ids)} tokens"
        prompt_ids = [5, 6, 7]
        pad = tokenizer.pad_token_id
        prompts.append([pad] * (PROMPT_LEN - len(prompt_ids)) + prompt_ids)
        responses.append(ids + [pad] * (RESPONSE_LEN - len(ids)))
        masks.append(
            [0] * (PROMPT_LEN - len(prompt_ids))
            + [1] * len(prompt_ids)
            + [1] * len(ids)
            + [0] * (RESPONSE_LEN - len(ids))
        )
    prompts_t, responses_t = torch.tensor(prompts), torch.tensor(responses)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": torch.tensor(masks),
        },
        non_tensors={
            "data_source": np.array([r[1] for r in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": r[2]} for r in rows], dtype=object),
            "extra_info": np.array([r[3] for r in rows], dtype=object),
        },
    )


def run_all(manager, batch):
    async def go():
        return await asyncio.gather(*(manager.run_single(batch[i : i + 1]) for i in range(len(batch))))

    return asyncio.run(go())


def test_xrpo_is_selected_by_name_through_verl(tokenizer):
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import load_reward_manager

    assert get_reward_manager_cls("xrpo") is XrpoRewardManager
    manager = load_reward_manager(make_config(), tokenizer)
    assert isinstance(manager, XrpoRewardManager)


def test_routes_by_data_source_and_reports_fixed_keys(tokenizer):
    from verl.trainer.ppo.reward import load_reward_manager

    manager = load_reward_manager(make_config(math={"timeout_s": 20.0, "num_workers": 2}), tokenizer)
    problem = {"id": "p", "judge": "livecodebench", "kind": "stdio", "fn_name": None,
               "tests": [{"input": "1\n", "output": "1\n"}], "time_limit_s": 1.0, "memory_mb": 256, "checker": None}  # fmt: skip
    rows = [
        ("so \\boxed{4}", "math/gsm8k", "4", {"index": 0}),
        ("so \\boxed{5}", "openai/gsm8k", "4", {"index": 1}),
        ("I do not know", "math/aime2025", "70", {"index": 2}),
        ("no code, sorry", "code/livecodebench", "p", {"index": 3, "problem": problem}),
    ]
    batch = make_batch(tokenizer, rows)
    outputs = run_all(manager, batch)

    scores = [o["reward_score"] for o in outputs]
    assert scores == [1.0, 0.0, 0.0, 0.0]
    infos = [o["reward_extra_info"] for o in outputs]
    assert [i["verdict"] for i in infos] == ["correct", "wrong", "no_answer", "no_code"]
    assert [i["acc"] for i in infos] == [1.0, 0.0, 0.0, 0.0]
    assert [i["pred"] for i in infos] == ["4", "5", "", ""]
    # length = valid response tokens, including the EOS token.
    expected_len = [len(tokenizer(r[0], add_special_tokens=False)["input_ids"]) + 1 for r in rows]
    assert [i["length"] for i in infos] == expected_len
    # verl builds reward columns from the first row's keys: every row must have the same ones.
    assert all(set(i) == set(infos[0]) for i in infos)
    assert {"acc", "verdict", "length", "score", "pred", "reason"} <= set(infos[0])
    # The batch's extra_info is not mutated.
    assert batch.non_tensor_batch["extra_info"][0] == {"index": 0}

    rm_scores = XrpoRewardManager.assemble_rm_scores(batch, scores)
    assert rm_scores.shape == (4, RESPONSE_LEN)
    assert rm_scores[0, expected_len[0] - 1] == 1.0 and rm_scores.sum() == 1.0


def test_unknown_data_source_raises_naming_it(tokenizer):
    manager = XrpoRewardManager(make_config(), tokenizer, None)
    batch = make_batch(tokenizer, [("\\boxed{1}", "chemistry/x", "1", {})])
    with pytest.raises(ValueError, match="chemistry/x"):
        run_all(manager, batch)


def test_overlong_penalty_matches_dapo_formula(tokenizer):
    # L_max = 16, L_cache = 8: no penalty up to 8 tokens, then linear to -1 at 16.
    assert overlong_reward(8, 16, 8, 1.0) == 0.0
    assert overlong_reward(12, 16, 8, 1.0) == -0.5
    assert overlong_reward(16, 16, 8, 0.5) == -0.5
    assert overlong_reward(3, 16, 8, 1.0) == 0.0

    config = make_config(
        overlong_buffer_cfg={"enable": True, "len": 4, "penalty_factor": 1.0, "log": True},
        max_resp_len=8,
        math={"timeout_s": 20.0, "num_workers": 2},
    )
    manager = XrpoRewardManager(config, tokenizer, None)
    text = "The answer is \\boxed{6} because 3 + 3 = 6."
    batch = make_batch(tokenizer, [(text, "math/x", "6", {})])
    (out,) = run_all(manager, batch)
    length = out["reward_extra_info"]["length"]
    expected_penalty = min(-(length - 4) / 4, 0.0)
    assert length > 4 and expected_penalty < 0
    assert out["reward_score"] == pytest.approx(1.0 + expected_penalty)
    assert out["reward_extra_info"]["overlong_reward"] == pytest.approx(expected_penalty)
    assert out["reward_extra_info"]["overlong"] is True
    assert out["reward_extra_info"]["score"] == 1.0  # the task score stays separate


def test_concurrency_limit_is_respected(tokenizer):
    in_flight, peak = 0, 0

    async def slow_score(data_source, solution_str, ground_truth, extra_info):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return 1.0

    manager = XrpoRewardManager(make_config(max_concurrency=2), tokenizer, slow_score)
    batch = make_batch(tokenizer, [("x", "math/x", "1", {})] * 7)
    before = time.time()
    outputs = run_all(manager, batch)
    received = outputs[0]["reward_extra_info"].pop("received_at")
    assert before <= received <= time.time()  # stamped when the response arrived, for the sandbox's share
    assert peak == 2
    peak = 0
    run_all(manager, batch)  # a second event loop: the limit holds there too, and nothing is loop-bound
    assert peak == 2
    # A custom float scorer is reduced to the same keys; acc = score.
    assert outputs[0]["reward_extra_info"] == {
        "score": 1.0,
        "acc": 1.0,
        "pred": "",
        "verdict": "",
        "reason": "",
        "passed": 0,
        "total": 0,
        "language": "",
        "sandbox_s": 0.0,
        "sandbox_start": 0.0,
        "sandbox_end": 0.0,
        "attempts": 0,
        "memo_hit": 0.0,
        "length": 2,
    }


def test_custom_reward_function_file_replaces_routing(tokenizer, tmp_path):
    from verl.trainer.ppo.reward import load_reward_manager

    path = tmp_path / "my_reward.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return {'score': 0.25, 'verdict': 'custom'}\n"
    )
    config = make_config()
    config.reward.custom_reward_function.path = str(path)
    manager = load_reward_manager(config, tokenizer)
    (out,) = run_all(manager, make_batch(tokenizer, [("x", "anything/at-all", "1", {})]))
    assert out["reward_score"] == 0.25 and out["reward_extra_info"]["verdict"] == "custom"
    assert out["reward_extra_info"]["acc"] == 0.25


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_concurency": 3}, r"reward_kwargs: unknown key\(s\) \['max_concurency'\]"),
        ({"math": {"timeout": 3}}, r"XrpoRewardConfig.math: unknown key\(s\) \['timeout'\]"),
        ({"code": {"reward_mode": "partial"}}, "reward_mode"),
        ({"overlong_buffer_cfg": {"enable": True, "len": 4}}, "max_resp_len"),
        ({"overlong_buffer_cfg": {"enable": True, "len": 0}, "max_resp_len": 8}, "len must be > 0"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"math_sources": ["code/x"]}, "both math and code"),
    ],
)
def test_bad_reward_kwargs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        parse_reward_kwargs(kwargs)


def test_code_scorer_takes_a_list_of_sandbox_urls():
    """reward_kwargs from YAML carry lists; the code scorer spreads over them with fail-over."""
    settings = parse_reward_kwargs(
        {"code": {"backend": "remote", "url": ["http://127.0.0.1:8080", "http://127.0.0.1:8081"]}}
    )
    code = settings.routing.code
    assert code.url == ("http://127.0.0.1:8080", "http://127.0.0.1:8081")
    remote = code.sandbox_backend()
    assert remote.urls == list(code.url) and remote is code.sandbox_backend()  # one shared client
    with pytest.raises(ValueError, match="non-empty list of URLs"):
        parse_reward_kwargs({"code": {"backend": "remote", "url": []}})


def test_a_reward_worker_refuses_to_start_without_its_sandbox_service(tokenizer):
    import socket

    from xrpo_verl.rewards.code import SandboxFailure

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(SandboxFailure, match="start_sandbox.sh"):
        XrpoRewardManager(make_config(code={"backend": "remote", "url": [dead]}), tokenizer, None)
