"""The settings' shared fields are written once (`setting.Setting`); each setting keeps its defaults
and its model's cache key, so the cached and shipped models and the study's records still fit."""

import dataclasses

import pytest

from xrpo_verl.config import option
from xrpo_verl.lab import code_rl, learning_setting, testbed, tiny_model
from xrpo_verl.lab.setting import Setting

SHARED = ("steps", "prompts_per_step", "n", "lr", "max_response_length", "n_heldout", "val_samples", "data_seed")


def _defaults(setting) -> dict:
    return {f.name: getattr(setting, f.name) for f in dataclasses.fields(setting) if f.name != "model"}


def test_each_setting_keeps_its_defaults():
    assert _defaults(learning_setting.LearningSetting()) == {
        "steps": 50, "prompts_per_step": 8, "n": 8, "lr": 3e-5, "max_response_length": 48, "n_heldout": 100,
        "val_samples": 4, "data_seed": 11, "n_train": 4096, "n_eval": 400,
    }  # fmt: skip
    assert _defaults(code_rl.CodeSetting()) == {
        "steps": 30, "prompts_per_step": 8, "n": 8, "lr": 6e-5, "max_response_length": 48, "n_heldout": 64,
        "val_samples": 16, "data_seed": 5, "backend": "bwrap", "url": (), "max_concurrency": 4, "n_train": 0,
    }  # fmt: skip
    # issue 46's second task: the code task with its hard tail, 96 problems for 48 steps
    assert _defaults(code_rl.TAIL) == {**_defaults(code_rl.CodeSetting()), "n_train": 96, "steps": 48}


def test_every_models_cache_key_is_unchanged():
    assert tiny_model.TinyModelConfig().key == "ae5cc51e3fb4"
    assert learning_setting.MODEL.key == learning_setting.LearningSetting().model.key == "4c18b4ea8cab"
    assert testbed.MODEL.key == testbed.SETTING.model.key == testbed.EPOCHS.model.key == "89aa2aa22d39"
    assert code_rl.MODEL.key == code_rl.CodeSetting().model.key == "72da08585662"
    assert code_rl.TAIL_MODEL.key == code_rl.TAIL.model.key == "4416e478b402"


def test_the_shared_fields_are_declared_once_with_one_help_line():
    for cls in (learning_setting.LearningSetting, code_rl.CodeSetting):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in (*SHARED, "model"):
            assert fields[name].metadata["help"] == Setting.__dataclass_fields__[name].metadata["help"]
        assert all(f.metadata.get("help") for f in fields.values())
    assert code_rl.CodeSetting.from_dict({"steps": 3, "url": ["http://a"]}) == code_rl.CodeSetting(
        steps=3, url=("http://a",)
    )
    with pytest.raises(ValueError, match="steps"):
        code_rl.CodeSetting(steps="3")  # the base's type check holds in every setting


def test_a_default_for_a_field_setting_does_not_have_is_refused():
    with pytest.raises(TypeError, match="stepz"):

        @dataclasses.dataclass(frozen=True)
        class Wrong(Setting, stepz=3):
            extra: int = option(1, "An extra field. [I]")
