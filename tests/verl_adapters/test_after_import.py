"""`after_import`: a hook runs once, after the module's code and before the importing statement
returns, or at once for a module already loaded."""

import sys

from xrpo_verl.verl_adapters.after_import import after_import


def test_a_hook_runs_when_the_module_loads_and_before_a_from_import_binds(tmp_path, monkeypatch):
    (tmp_path / "xrpo_hook_target.py").write_text("VALUE = 1\nseen_by_module = VALUE\n")
    (tmp_path / "xrpo_hook_user.py").write_text("from xrpo_hook_target import VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("xrpo_hook_target", "xrpo_hook_user"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    calls = []

    def patch(module):
        calls.append(module.__name__)
        module.VALUE = 2

    after_import("xrpo_hook_target", patch)
    assert calls == []  # not imported to be patched
    import xrpo_hook_user

    assert calls == ["xrpo_hook_target"]
    assert xrpo_hook_user.VALUE == 2  # the name imported by value is the patched one
    assert sys.modules["xrpo_hook_target"].seen_by_module == 1  # ran after the module's own code
    import importlib

    importlib.reload(sys.modules["xrpo_hook_target"])
    assert calls == ["xrpo_hook_target"]  # once


def test_a_loaded_module_is_hooked_at_once():
    calls = []
    after_import("json", lambda module: calls.append(module.__name__))
    assert calls == ["json"]
