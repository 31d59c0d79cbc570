"""The house's layout rules: imports inside ``harness/`` run one way (no cycles), primitives never import
decoders, and every decoder is one registered file."""
import ast
from pathlib import Path

import harness

ROOT = Path(harness.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _exists(module: str) -> bool:
    rel = Path(*module.split("."))
    return (ROOT.parent / rel).with_suffix(".py").is_file() or (ROOT.parent / rel / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    """module -> the harness modules it imports, from every ``import``/``from ... import`` line in it
    (function-level imports included). ``from harness.x import y`` counts as importing ``harness.x.y``
    when y is a module, else ``harness.x``."""
    graph: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = _module_name(path)
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "harness":
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    edges.add(sub if _exists(sub) else node.module)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name.split(".")[0] == "harness")
        edges.discard(name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_the_speculative_modules():
    graph = import_graph()
    assert "harness.primitives.spec_state" in graph["harness.primitives.spec_loop"]
    assert "harness.primitives.acceptance" in graph["harness.primitives.spec_loop"]
    assert "harness.decoders.speculative" in graph["harness.decoders.sd"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_harness_imports_have_no_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_primitives_import_only_primitives_and_leaf_modules():
    """Data flows prompt → decoder → generation → record → report: primitives sit below decoders."""
    allowed = ("harness.primitives", "harness.errors")
    for module, edges in import_graph().items():
        if module.startswith("harness.primitives"):
            bad = sorted(e for e in edges if not e.startswith(allowed))
            assert not bad, f"{module} imports {bad}"


#: modules of harness/decoders that hold no decoder: the contract, the speculative template, the decision-model loader,
#: the trained-head decoders' shared base
DECODER_SUPPORT = ("__init__", "base", "speculative", "decision_model", "head_drafting")


def test_every_decoder_module_registers_one_decoder():
    from collections import Counter

    from harness.decoders import registry

    files = {p.stem for p in (ROOT / "decoders").glob("*.py") if p.stem not in DECODER_SUPPORT}
    modules = Counter(cls.__module__.rsplit(".", 1)[-1] for cls in registry().values())
    assert files == set(modules) and set(modules.values()) == {1}


def test_no_module_over_400_lines_and_no_function_over_60_without_a_reason():
    """The house rule, for the packages this layout test owns (decoders, primitives, adaptive, methods, testing)."""
    owned = ("decoders", "primitives", "adaptive", "testing")
    paths = [p for d in owned for p in (ROOT / d).rglob("*.py")]
    paths += [ROOT / f for f in ("methods.py", "config/legacy.py", "params.py", "selection.py", "stats.py", "decoding.py",
                                 "config/groups.py")]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 400 or "long because" in text[:2000], path
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                doc = ast.get_docstring(node) or ""
                assert length <= 60 or "long because" in doc, f"{path.name}:{node.name} has {length} lines"


#: the entrance: stage rooms (config -> run -> results -> report, the command line in cli) and the science's packages;
#: the few top-level modules are shared leaves (errors, registry, resources) and the domain's core names
ROOMS = {"cli", "config", "run", "results", "report", "analysis", "decoders", "primitives", "adaptive", "energy",
         "heads", "judge", "metrics", "sandbox", "tasks", "testing", "tools", "assets"}
TOP_MODULES = {"__init__", "__main__", "api", "errors", "registry", "resources", "references", "models", "methods", "params",
               "decoding", "stats", "selection"}


def test_the_entrance_is_a_few_rooms_and_a_few_modules():
    assert {p.stem for p in ROOT.glob("*.py")} <= TOP_MODULES
    assert {p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"} <= ROOMS


# Tests mirror the package (docs/testing.md, "Where a test goes"): harness/<room>/<name>.py is tested in
# tests/<room>/; only these stay at the top of tests/: the whole project's checks (layout, static checks, package
# metadata, wheel, SLURM and sbatch scripts, fuzzing, the experiments' composition) and the tests of the entrance's
# modules (harness/<name>.py: api, decoding, models, registry, stats). A new test file goes into its room.
TOP_TESTS = {"test_layout", "test_static", "test_package", "test_wheel", "test_slurm", "test_sbatch", "test_fuzz",
             "test_experiments", "test_api", "test_decoding", "test_models", "test_adaptive_models", "test_registry",
             "test_stats"}


def test_tests_mirror_the_package():
    tests = Path(__file__).resolve().parent
    flat = {p.stem for p in tests.glob("test_*.py")}
    assert flat <= TOP_TESTS, (f"new test files at the top of tests/: {sorted(flat - TOP_TESTS)}; put each into the "
                               "folder of the package room it tests (tests/<room>/, docs/testing.md)")
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert folders <= ROOMS, f"test folders that name no room of harness/: {sorted(folders - ROOMS)}"
    names = [p.name for p in tests.rglob("test_*.py") if "plugin_example" not in p.parts]
    assert len(names) == len(set(names)), "two test files share a name (pytest imports them by name)"


def test_configs_and_task_data_sit_at_the_top_of_the_checkout_and_map_into_the_wheel():
    """The design card's layout (conf/, tasks/ beside the package) and an installable wheel (harness/conf,
    harness/data inside it: setup.py's package_dir) both hold; the locator finds the checkout's folders here."""
    from harness import resources

    repo = ROOT.parent
    assert (repo / "conf" / "config.yaml").is_file() and (repo / "tasks" / "kjv_heldout").is_dir()
    assert not (ROOT / "conf").exists() and not (ROOT / "data").exists()
    assert resources.conf_dir() == repo / "conf" and resources.data_dir() == repo / "tasks"
    setup = (repo / "setup.py").read_text(encoding="utf-8")
    assert '"harness.conf": "conf"' in setup and '"harness.data": "tasks"' in setup
