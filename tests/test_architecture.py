"""The layers of docs/architecture.md, checked on the source: who may import what, and that every
`docs/...` file the code names exists in the repository."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE = ["planner", "advantages", "novelty", "icl", "prefix", "metrics", "embeddings", "config"]
FRAMEWORKS = {"verl", "ray", "transfer_queue", "tensordict", "hydra", "omegaconf"}

# layer (files) -> top-level packages it must never import
RULES = {
    "xrpo_verl/<pure>.py": ([ROOT / "xrpo_verl" / f"{m}.py" for m in PURE], FRAMEWORKS | {"sandbox"}),
    "sandbox/": (sorted((ROOT / "sandbox").rglob("*.py")), FRAMEWORKS | {"torch", "xrpo_verl", "transformers"}),
    "xrpo_verl/rewards/ scorers": (
        [ROOT / "xrpo_verl" / "rewards" / f"{m}.py" for m in ("math", "code", "extract", "routing")],
        FRAMEWORKS,
    ),
    "xrpo_verl/data/": (sorted((ROOT / "xrpo_verl" / "data").rglob("*.py")), FRAMEWORKS),
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_imports_nothing_above_it(layer):
    files, banned = RULES[layer]
    assert files, layer
    offenders = {str(f.relative_to(ROOT)): sorted(imported_packages(f) & banned) for f in files}
    assert {f: b for f, b in offenders.items() if b} == {}


def _sources() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    for top in ("xrpo_verl", "sandbox", "tests", "benchmarks", "recipes", "scripts", "docs"):
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
