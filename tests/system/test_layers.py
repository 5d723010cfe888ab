"""The import graph of gitstate and gitstate_cli stays layered: no import cycle (imports inside
functions and under ``TYPE_CHECKING`` count), no private name imported or reached across modules,
and no layer importing one above it:

    errors → git → format → secrets, workspace → store → sync, verify, view → langgraph, adapters, integrations,
    openai_agents, agent_framework, crewai → gitstate → gitstate_cli
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"gitstate": ROOT / "gitstate", "gitstate_cli": ROOT / "gitstate_cli"}
RANKS = {
    "gitstate.errors": 0, "gitstate.exports": 0, "gitstate.git": 1, "gitstate.format": 2, "gitstate.secrets": 3,
    "gitstate.workspace": 3,
    "gitstate.store": 4, "gitstate.sync": 5, "gitstate.verify": 5, "gitstate.view": 5, "gitstate.langgraph": 6,
    "gitstate.adapters": 6, "gitstate.integrations": 6, "gitstate.openai_agents": 6,
    "gitstate.agent_framework": 6, "gitstate.crewai": 6, "gitstate": 7, "gitstate_cli": 8,
}
# Attributes of pygit2's own objects that gitstate must reach (none today).
FOREIGN_PRIVATE: set[str] = set()
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_exit", "_getframe"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = path
    return out


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                if not own and node.attr not in FOREIGN_PRIVATE | NAMEDTUPLE_API:
                    private.append(f"{path.relative_to(ROOT)}:{node.lineno} reaches .{node.attr}")
            targets: list[tuple[str, str | None]] = []
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, a.name)
                           for a in node.names]
            for target, name in targets:
                owner = _owner(target, modules)
                if owner is None or owner == mod:
                    continue
                if name and name.startswith("_") and not name.startswith("__"):
                    private.append(f"{mod} imports {name} from {owner}")
                if not (is_pkg and owner.startswith(mod + ".")):  # a package re-exporting its own parts
                    edges[mod].add(owner)
    return edges, private


def _rank(module: str) -> int:
    best = ""
    for prefix in RANKS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return RANKS[best]


def test_no_import_cycles() -> None:
    edges, _ = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_private_names_across_modules() -> None:
    _, private = _graph()
    assert private == []


def test_no_layer_imports_a_higher_one() -> None:
    edges, _ = _graph()
    upward = [f"{m} (layer {_rank(m)}) imports {t} (layer {_rank(t)})"
              for m, targets in edges.items() for t in targets if _rank(t) > _rank(m)]
    assert upward == []


def test_the_checker_sees_violations(tmp_path: Path) -> None:
    """The graph really is read: a known edge and a known layer are found."""
    edges, _ = _graph()
    assert "gitstate.git.reader" in edges["gitstate.store.base"]
    assert _rank("gitstate.store.run") == 4 and _rank("gitstate_cli.main") == 8
