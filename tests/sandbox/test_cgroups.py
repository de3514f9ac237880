"""Which memory cgroup the bwrap slots use: v1's memory hierarchy, else v2's unified one with the
memory controller, else none (one warning)."""

from __future__ import annotations

import logging

from sandbox.backends import isolation
from sandbox.backends.isolation import MemoryCgroup, own_memory_cgroup


def _proc(tmp_path, text: str) -> str:
    path = tmp_path / "cgroup"
    path.write_text(text)
    return str(path)


def test_cgroup_v1_memory_hierarchy_is_preferred(tmp_path):
    (tmp_path / "memory" / "job").mkdir(parents=True)
    proc = _proc(tmp_path, "4:memory:/job\n1:cpu:/\n0::/\n")
    assert own_memory_cgroup(proc, str(tmp_path)) == (str(tmp_path / "memory" / "job"), 1)


def test_cgroup_v2_needs_the_memory_controller(tmp_path):
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / "cgroup.controllers").write_text("cpu io memory pids\n")
    proc = _proc(tmp_path, "0::/svc\n")
    assert own_memory_cgroup(proc, str(tmp_path)) == (str(tmp_path / "svc"), 2)
    (tmp_path / "svc" / "cgroup.controllers").write_text("cpu io pids\n")
    assert own_memory_cgroup(proc, str(tmp_path)) is None


def test_no_usable_cgroup_warns_once_and_reports_nothing(monkeypatch, caplog):
    monkeypatch.setattr(isolation, "own_memory_cgroup", lambda: None)
    monkeypatch.setattr(isolation, "_warned", False)
    with caplog.at_level(logging.WARNING, logger=isolation.__name__):
        groups = [MemoryCgroup(60000 + i) for i in range(3)]
    assert [r.message for r in caplog.records] == [
        "no per-test memory figures: no writable cgroup-v2 or cgroup-v1 memory group"
    ]
    assert all(g.peak_mb() is None and not g.reset_peak() for g in groups)
