"""The layers of docs/architecture.md, checked on the source: who may import what, that no module
imports itself back through others, and that every `docs/...` file the code names exists.

An import is any `import`/`from` statement, at module level or inside a function (a lazy import is
still a dependency), and any module of ours named by a string constant: `importlib.import_module`,
a plugin's registration table, `VERL_USE_EXTERNAL_MODULES`.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("xrpo_verl", "sandbox")
PURE = ["planner", "advantages", "novelty", "icl", "icl_gate", "prefix", "metrics", "embeddings", "config"]
FRAMEWORKS = {"verl", "ray", "transfer_queue", "tensordict", "hydra", "omegaconf"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for top in OURS for p in (ROOT / top).rglob("*.py")}


def _ours(name: str) -> str | None:
    """The module of ours that importing `name` loads (a name may end in a class or function)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path) -> set[str]:
    """Every module `path` imports: top-level names of third-party packages, full names of ours."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names]
            names = [n for n in subs if n in MODULES] or [base]  # `from pkg import module` imports the module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
            names = [node.value]  # importlib.import_module("..."), registration tables, env variables
        for name in names:
            ours = _ours(name) if name.split(".")[0] in OURS else None
            out.add(ours if ours else name.split(".")[0])
    out.discard(me)
    return out


GRAPH = {m: {d for d in imports(p) if d in MODULES} for m, p in MODULES.items()}


def _files(*patterns: str) -> list[Path]:
    return sorted(p for pattern in patterns for p in ROOT.glob(pattern))


# The CPU mode: the platform every process of a run loads, the toy lab that launches runs, and
# the platform's entry point under its old name.
CPU_MODE = ("xrpo_verl.cpu", "xrpo_verl.lab", "xrpo_verl.local")

# the reward scorers, and the manager that runs them: what the trainer must not reach into
SCORERS = {
    f"xrpo_verl.rewards.{m}"
    for m in ("math", "code", "extract", "routing", "manager", "_verify_pool", "_verify_worker")
}

# layer -> (its files, what they must never import: a top-level package, or a package of ours)
RULES = {
    "xrpo_verl/<pure>.py": (
        [ROOT / "xrpo_verl" / f"{m}.py" for m in PURE],
        FRAMEWORKS | {"sandbox", "xrpo_verl.verl_adapters", *CPU_MODE, "xrpo_verl.rewards", "xrpo_verl.eval"},
    ),
    "sandbox/": (_files("sandbox/**/*.py"), FRAMEWORKS | {"torch", "transformers", "xrpo_verl"}),
    "xrpo_verl/rewards/ scorers": (
        [ROOT / "xrpo_verl" / "rewards" / f"{m}.py" for m in ("math", "code", "extract", "routing")],
        FRAMEWORKS | {"xrpo_verl.verl_adapters", *CPU_MODE},
    ),
    # the result schema and its step metrics: what scorers fill and adapters read, below both
    "xrpo_verl/rewards/ schema": (
        [ROOT / "xrpo_verl" / "rewards" / f"{m}.py" for m in ("result", "sandbox_metrics")],
        FRAMEWORKS | SCORERS | {"sandbox", "xrpo_verl.verl_adapters", *CPU_MODE},
    ),
    # the trainer mode reads the scorers' results, never the scorers (the plugin's registration
    # table, which files the reward manager with verl, is the one exception)
    "xrpo_verl/verl_adapters/ but plugin.py": (
        [p for p in _files("xrpo_verl/verl_adapters/*.py") if p.name != "plugin.py"],
        SCORERS,
    ),
    "xrpo_verl/data/": (_files("xrpo_verl/data/**/*.py"), FRAMEWORKS),
    # the adapters import verl and everything of ours below them, nothing above
    "xrpo_verl/verl_adapters/, rewards/manager.py": (
        _files("xrpo_verl/verl_adapters/*.py", "xrpo_verl/rewards/manager.py"),
        {*CPU_MODE, "xrpo_verl.eval"},
    ),
    # every process of a run loads the platform through the `xrpo_cpu` entry point: it never
    # imports the toy lab that launches those runs (nor the old path that re-exports it)
    "xrpo_verl/cpu/": (_files("xrpo_verl/cpu/**/*.py"), {"xrpo_verl.lab", "xrpo_verl.local"}),
}


def _banned(imported: set[str], banned: set[str]) -> list[str]:
    return sorted(m for m in imported if m in banned or any(m.startswith(b + ".") for b in banned))


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_imports_nothing_above_it(layer):
    files, banned = RULES[layer]
    assert files, layer
    offenders = {str(f.relative_to(ROOT)): _banned(imports(f), banned) for f in files}
    assert {f: b for f, b in offenders.items() if b} == {}


# sandbox/ by tier, lowest first: a module imports only its own tier and those below. The judges
# grade what the backends ran; the transports and entry points (remote judging, the server, the
# command line, the package's exports) use the judges. Every module of sandbox/ has a tier.
SANDBOX_TIERS = [
    {"sandbox.verdict", "sandbox.runner", "sandbox.languages", "sandbox.problem", "sandbox.options", "sandbox.image"},
    {m for m in MODULES if m.startswith("sandbox.backends")},
    {m for m in MODULES if m.startswith("sandbox.judges")},
    {"sandbox", "sandbox.__main__", "sandbox.remote", "sandbox.runcode", "sandbox.server"},
]


def test_sandbox_imports_only_its_own_tier_and_below():
    tier = {m: t for t, mods in enumerate(SANDBOX_TIERS) for m in mods}
    assert set(tier) == {m for m in MODULES if m.split(".")[0] == "sandbox"}  # a new module needs a tier
    upward = {m: sorted(d for d in GRAPH[m] if d in tier and tier[d] > tier[m]) for m in tier}
    assert {m: d for m, d in upward.items() if d} == {}


def test_the_trainer_reads_no_scorer():
    """Named apart from the layer rule: the trainer once imported the code scorer for its metrics."""
    assert not {d for d in GRAPH["xrpo_verl.verl_adapters.trainer"] if d in SCORERS}
    assert "xrpo_verl.rewards.sandbox_metrics" in GRAPH["xrpo_verl.verl_adapters.trainer"]


def test_the_import_scan_sees_lazy_and_importlib_imports(tmp_path):
    """A scan that missed these would pass a circle made of them."""
    assert "xrpo_verl.verl_adapters.trainer" in GRAPH["xrpo_verl.verl_adapters.plugin"]  # registration table
    assert "xrpo_verl.cpu.register" in GRAPH["xrpo_verl.lab.launch"]  # VERL_USE_EXTERNAL_MODULES
    assert "xrpo_verl.cpu.shims" in GRAPH["xrpo_verl.cpu.register"]  # imported inside enable()


def test_the_platform_is_a_folder_of_its_own_and_the_entry_point_loads_it():
    """The boundary is drawn by folder: a platform module left in the lab, or a lab module moved into
    the platform, would escape the rule above; and `xrpo_cpu` must name a platform module."""
    platform = {"switches", "register", "shims", "vllm_cpu", "hf_rollout"}
    assert {m.rpartition(".")[2] for m in MODULES if m.startswith("xrpo_verl.cpu.")} == platform
    assert not platform & {m.rpartition(".")[2] for m in MODULES if m.startswith("xrpo_verl.lab.")}
    assert re.search(r'(?m)^xrpo_cpu = "xrpo_verl\.cpu\.register"$', (ROOT / "pyproject.toml").read_text())
    assert {m for m in MODULES if m.startswith("xrpo_verl.local")} == {"xrpo_verl.local", "xrpo_verl.local.register"}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back():
    assert _cycles(GRAPH) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check can fail


def _sources() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    for top in ("xrpo_verl", "sandbox", "tests", "benchmarks", "studies", "recipes", "scripts", "docs"):
        found += [p for p in (ROOT / top).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".sh"}]
    return [p for p in found if p.is_file()]


def test_every_docs_path_named_in_the_repository_exists():
    missing = {}
    for path in _sources():
        for ref in re.findall(r"(?<![\w/.])docs/[\w./-]+\.md", path.read_text(errors="replace")):
            if not (ROOT / ref).is_file():
                missing.setdefault(ref, []).append(str(path.relative_to(ROOT)))
    assert missing == {}


def test_nothing_cites_research_notes_outside_the_repository():
    here = Path(__file__).resolve()
    cites = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if p.resolve() != here and re.search(r"shared/docs|\.\./shared", p.read_text())
    ]
    assert cites == []
