"""Run a function on a module right after it is imported, or now if it is imported already.

verl imports a plugin in every process (driver, Ray workers, reward workers) at `import verl`.
What we add to verl (registry names, CPU shims) belongs to modules that many of those processes
never load: importing them to patch them would make every process pay for them (a second or two
each for verl's FSDP utilities, on a small machine). Instead, the function runs when the module
finishes executing, before the statement that imported it returns, so whoever imports it by name
(`from verl.x import y`) already sees the change.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable

_hooks: dict[str, list[Callable]] = {}
_lock = threading.RLock()


def after_import(module_name: str, hook: Callable) -> None:
    """Call `hook(module)` once `module_name` is imported: now if it is, else right after it loads.

    A module caught half-executed (a circular import in progress) gets the hook when it finishes
    only if this watcher found it; one that another finder's loader is already executing is past
    the point where it can be hooked, and the hook waits for an import that will not come."""
    module = sys.modules.get(module_name)
    if module is not None and not initializing(module):
        hook(module)
        return
    with _lock:
        _hooks.setdefault(module_name, []).append(hook)
        if not any(isinstance(f, _Watcher) for f in sys.meta_path):
            sys.meta_path.insert(0, _Watcher())


def initializing(module) -> bool:
    """True while the module's own code is still executing (a circular import is in progress)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _run_hooks(module_name: str, module) -> None:
    with _lock:
        hooks = _hooks.pop(module_name, [])
    for hook in hooks:
        hook(module)


class _RunHooksAfterExec(importlib.abc.Loader):
    """Wraps a module's own loader: executes the module, then runs its hooks."""

    def __init__(self, loader, name: str):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _run_hooks(self._name, module)

    def __getattr__(self, attr):  # get_code, get_source, is_package, ... as the real loader
        return getattr(self._loader, attr)


class _Watcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hands back the real spec of a watched module with its loader wrapped."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RunHooksAfterExec(spec.loader, fullname)
                return spec
        return None
