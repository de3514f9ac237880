"""The tiny model: deterministic, cached build; size."""

import hashlib
import json

import pytest
from transformers import AutoTokenizer

from xrpo_verl.lab import tiny_model


@pytest.mark.slow  # a fresh interpreter or a model build
def test_tiny_model_build_is_deterministic_cached_and_pins_the_cpu_kernels(tmp_path, monkeypatch):
    """Two builds give the same bytes, the second with the caller's kernels set otherwise: a CPU
    with AVX-512 would otherwise warm up a different model from one with AVX2 only."""
    import torch

    config = tiny_model.TinyModelConfig(
        hidden_size=32, intermediate_size=64, num_layers=1, sft_steps=3, sft_batch_size=4
    )
    x86 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    plain = tiny_model.build(config, root=tmp_path / "a", verbose=False)
    if x86:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # the caller's setting must not reach the build
    other = tiny_model.build(config, root=tmp_path / "b", verbose=False)
    dirs = [plain, other]
    digests = [hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest() for d in dirs]
    assert digests[0] == digests[1]
    if x86:
        metas = [json.loads((d / tiny_model.DONE_MARKER).read_text()) for d in dirs]
        assert [m["cpu_kernels"] for m in metas] == ["AVX2", "AVX2"]
    assert (dirs[0] / "tokenizer.json").read_text() == (dirs[1] / "tokenizer.json").read_text()
    marker = dirs[0] / tiny_model.DONE_MARKER
    mtime = marker.stat().st_mtime_ns
    assert tiny_model.build(config, root=tmp_path / "a", verbose=False) == dirs[0]  # cache hit: no rebuild
    assert marker.stat().st_mtime_ns == mtime
    tok = AutoTokenizer.from_pretrained(dirs[0])
    tokens = tok.tokenize("12+7=?")
    assert tokens[:2] == ["1", "2"]  # digits are single tokens
    text = tok.apply_chat_template([{"role": "user", "content": "1+1=?"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\n1+1=?<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="num_heads"):
        tiny_model.TinyModelConfig(hidden_size=30, num_heads=4)


def test_default_tiny_model_has_about_5m_parameters():
    config = tiny_model.TinyModelConfig(sft_steps=0)
    model = tiny_model.build_model(config, tiny_model.build_tokenizer(config))
    assert 4.5e6 < sum(p.numel() for p in model.parameters()) < 5.5e6


def test_few_shot_rows_are_xrpo_icl_prompts_of_retrieved_neighbours_in_one_style():
    """The warm-up's few-shot prompts are what XRPO's ICL seeding writes (real MiniLM retrieval):
    examples in the target's style and, for a family, with the target's offset; a known family's
    offset is its own, an unknown one's changes from prompt to prompt (read from context only)."""
    import re
    from dataclasses import replace

    from xrpo_verl import icl
    from xrpo_verl.lab import addition, testbed

    config = replace(testbed.MODEL, fewshot_pool=60)
    pool = tiny_model.FewShotPool(config)
    assert all(len(n) == config.fewshot_k and i not in n for i, n in enumerate(pool.neighbours))
    offsets = addition.family_offsets(config.addition)
    known = set(addition.FAMILY_NAMES[: config.addition.known_families])
    seen_unknown: dict[str, set[int]] = {}
    same_family = 0
    for user, target in pool.rows(200, seed=1, count_tokens=len):
        assert user.startswith(icl.ICL_HEADER) and user.count("Problem: ") == 2
        family, a, b = re.fullmatch(r"(\w+): (\d+)\+(\d+)=\?", user.rsplit("\n", 1)[1]).groups()
        style = addition.style_of(target)
        offset = int(re.search(r"\\boxed\{(\d+)\}", target).group(1)) - int(a) - int(b)
        assert target == addition.solution_text(addition.Sum(int(a), int(b), family, offset), style)
        blocks = [x.split("\nSolution: ") for x in user.split("Problem: ")[1:]]
        assert {addition.style_of(sol) for _, sol in blocks} == {style}
        for question, sol in blocks:
            if question.startswith(family + ":"):
                same_family += 1
                shown = sol.split("\n", 1)[0].split("=")[0].split("+")
                assert int(shown[2]) == offset  # the example shows the target's offset
        if family in known:
            assert offset == offsets[family]
        else:
            seen_unknown.setdefault(family, set()).add(offset)
    assert same_family > 300  # MiniLM retrieves the query's own family (the name leads the prompt)
    assert max(len(v) for v in seen_unknown.values()) > 1  # an unknown family's offset is not fixed


def test_token_mean_loss_over_parts_equals_one_padded_batch():
    """Few-shot rows are padded apart from the zero-shot ones; the loss must not change."""
    import torch

    config = tiny_model.TinyModelConfig(task="addition", hidden_size=32, intermediate_size=64, num_layers=1)
    tok = tiny_model.build_tokenizer(config)
    torch.manual_seed(0)
    model = tiny_model.build_model(config, tok).double()
    with torch.no_grad():  # sharper logits than at init, so that token losses differ
        model.model.embed_tokens.weight.mul_(50)
    rows = [("12+3=?", "2+3=5\n1+0=1\n\\boxed{15}"), ("1+1=?", "1+1=2\n\\boxed{2}"), ("9+9=?", "9+9=18\n\\boxed{18}")]
    ids, mask, labels = tiny_model.sft_batch(tok, rows)
    whole = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    parts = tiny_model._token_mean_loss(model, tok, [rows[:1], rows[1:], []])
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)  # transformers takes the loss in float32
    # the mean of the parts' own means weighs the one long row as much as the two short ones
    naive = (
        tiny_model._token_mean_loss(model, tok, [rows[:1]]) + tiny_model._token_mean_loss(model, tok, [rows[1:]])
    ) / 2
    assert naive.item() != pytest.approx(whole.item(), rel=1e-3)


@pytest.mark.slow  # a fresh interpreter or a model build
def test_a_two_style_few_shot_model_builds(tmp_path):
    """The premise testbed's kind of model, at toy size: both styles and few-shot rows in the warm-up."""
    from dataclasses import replace

    from xrpo_verl.lab import testbed

    config = replace(
        testbed.MODEL,
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        sft_steps=2,
        sft_batch_size=8,
        fewshot_share=0.5,
        fewshot_pool=40,
    )
    assert config.key != testbed.MODEL.key
    out = tiny_model.build(config, root=tmp_path, verbose=False)
    meta = json.loads((out / tiny_model.DONE_MARKER).read_text())
    assert meta["config"]["addition"]["styles"] == ["columns", "words"] and meta["config"]["fewshot_pool"] == 40
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok.tokenize("Here are examples of solved problems.")) < 10  # the template's words are tokens


def test_the_shipped_archives_hold_the_recorded_weights_of_their_config():
    """Each model in `SHIPPED` is in the package with the recorded weights; the testbed's is the model
    of the study's set C, and the code tail's the one its probes measured, so seeds run on any CPU
    join their set."""
    import tarfile
    from dataclasses import asdict
    from pathlib import Path

    from xrpo_verl.lab import testbed

    set_c = Path(__file__).resolve().parents[2] / "studies" / "records" / "convergence_testbed_c" / "model.json"
    recorded = json.loads(set_c.read_text())
    assert recorded["key"] == testbed.MODEL.key
    assert tiny_model.SHIPPED[testbed.MODEL.key] == recorded["weights_sha256"]
    # the code task with a hard tail: the model its probes chose (studies/code_tail_probes.py)
    from xrpo_verl.lab import code_rl, code_task

    probed = Path(__file__).resolve().parents[2] / "studies" / "records" / "code_tail" / f"{code_rl.TAIL_SHARE}.json"
    probe = json.loads(probed.read_text())
    assert probe["model_key"] == code_rl.TAIL_MODEL.key and probe["passes"]
    assert tiny_model.SHIPPED[code_rl.TAIL_MODEL.key] == probe["weights_sha256"]
    configs = {testbed.MODEL.key: testbed.MODEL, code_rl.TAIL_MODEL.key: code_rl.TAIL_MODEL}
    for key, sha in tiny_model.SHIPPED.items():
        with tarfile.open(tiny_model.shipped_archive(key), "r:xz") as tar:
            assert {"config.json", "tokenizer.json", "model.safetensors", tiny_model.DONE_MARKER} <= set(tar.getnames())
            weights = tar.extractfile("model.safetensors").read()
            meta = json.loads(tar.extractfile(tiny_model.DONE_MARKER).read())
        assert hashlib.sha256(weights).hexdigest() == sha
        if key in configs:  # the build's own record of its config
            expected = json.loads(json.dumps(asdict(configs[key])))
            # fields added to CodeConfig after a build are absent from its record, at their defaults
            defaults = json.loads(json.dumps(asdict(code_task.CodeConfig())))
            for name in set(expected["code"]) - set(meta["config"]["code"]):
                assert expected["code"].pop(name) == defaults[name]
            assert meta["config"] == expected


def test_build_unpacks_the_shipped_testbed_model_without_training(tmp_path, monkeypatch):
    """The testbed's model comes out of the package, not a warm-up: the same bytes on every CPU."""
    from transformers import AutoModelForCausalLM

    from xrpo_verl.lab import testbed

    monkeypatch.setenv("XRPO_VERL_CACHE", str(tmp_path))

    def no_training(*args, **kwargs):
        raise AssertionError("the shipped model was built, not unpacked")

    with monkeypatch.context() as m:
        m.setattr(tiny_model.subprocess, "run", no_training)
        m.setattr(tiny_model, "_build", no_training)
        out = tiny_model.build(testbed.MODEL, verbose=False)
        assert tiny_model.build(testbed.MODEL, verbose=False) == out  # then a cache hit
    assert out == tmp_path / "tiny_model" / testbed.MODEL.key
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no half-written directory left
    assert tiny_model.weights_sha256(out) == tiny_model.SHIPPED[testbed.MODEL.key]
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert 4.5e6 < sum(p.numel() for p in model.parameters()) < 5.5e6
    assert model.config.vocab_size == len(tok) <= testbed.MODEL.vocab_size
    assert tok.tokenize("12+7=?")[:2] == ["1", "2"]


def test_pack_is_reproducible_and_unpacking_refuses_other_weights(tmp_path, monkeypatch):
    import os

    src = tmp_path / "abc123"
    src.mkdir()
    (src / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (src / "config.json").write_text("{}")
    (src / tiny_model.DONE_MARKER).write_text("{}")
    monkeypatch.setattr(tiny_model, "ASSETS", tmp_path / "assets")
    archive = tiny_model.pack(src)
    assert archive == tmp_path / "assets" / "tiny_model-abc123.tar.xz"
    first = archive.read_bytes()
    os.utime(src / "config.json", (0, 12345))  # file times do not reach the archive
    assert tiny_model.pack(src).read_bytes() == first
    monkeypatch.setattr(tiny_model, "SHIPPED", {"abc123": tiny_model.weights_sha256(src)})
    out = tmp_path / "cache" / "abc123"
    tiny_model.unpack_shipped("abc123", out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes() for p in src.iterdir()}
    monkeypatch.setattr(tiny_model, "SHIPPED", {"abc123": "0" * 64})
    with pytest.raises(RuntimeError, match="not the shipped"):
        tiny_model.unpack_shipped("abc123", tmp_path / "other" / "abc123")
    assert list((tmp_path / "other").iterdir()) == []
    with pytest.raises(ValueError, match="not a built tiny model"):
        tiny_model.pack(tmp_path / "assets")
