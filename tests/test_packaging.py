"""Packaging: one top-level import name (``onnx2hw``; ``sim/`` and ``boards/`` install as
``onnx2hw.sim`` and ``onnx2hw.boards``), no test helpers in the wheel, and a non-editable,
read-only install that simulates from another directory."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from _paths import EXAMPLES, ROOT
from _sim_fixtures import require_simulator


def _declared_packages() -> dict[str, str]:
    """Package name -> source folder, as pyproject.toml maps them."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = cfg["package-dir"]
    out = {}
    for pkg in cfg["packages"]:
        top = max((k for k in dirs if pkg == k or pkg.startswith(k + ".")), key=len)
        out[pkg] = str(ROOT / dirs[top] / pkg[len(top):].lstrip(".").replace(".", "/"))
    return out


def test_every_package_folder_is_declared():
    declared = {os.path.normpath(p) for p in _declared_packages().values()}
    found = {os.path.normpath(str(p.parent)) for top in ("onnx2hw", "sim", "boards")
             for p in (ROOT / top).rglob("__init__.py")}
    assert declared == found, (sorted(found - declared), sorted(declared - found))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (whl,) = out.glob("onnx2hw-*.whl")
    return whl


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory):
    """The wheel installed (not editable) into a folder of its own."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    return target


@pytest.mark.slow
def test_package_layers_hold(site, tmp_path):
    """import-linter's contracts (pyproject.toml) on the installed package, where grimp sees
    onnx2hw.sim and onnx2hw.boards."""
    lint = Path(sys.executable).with_name("lint-imports")
    # the same contracts, with the layers that are optional in the editable install required here
    config = tmp_path / "pyproject.toml"
    config.write_text(re.sub(r'\((onnx2hw\.\w+)\)', r"\1", (ROOT / "pyproject.toml").read_text()))
    r = subprocess.run([str(lint), "--config", str(config)], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in r.stdout and "(onnx2hw.sim)" not in config.read_text()


def test_package_layers_hold_in_the_source_tree():
    """`lint-imports` as a developer runs it, at the repository root in the editable install."""
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in r.stdout


def _function_level_imports(path: Path) -> list[str]:
    """``file:line`` of each import of an onnx2hw module placed inside a function, unless a comment
    on its line or the line above says it is an optional dependency."""
    lines = path.read_text().splitlines()
    found = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                ours = node.level > 0 or (node.module or "").split(".")[0] == "onnx2hw"
            elif isinstance(node, ast.Import):
                ours = any(a.name.split(".")[0] == "onnx2hw" for a in node.names)
            else:
                continue
            near = " ".join(lines[max(0, node.lineno - 2):node.lineno])
            if ours and "optional dependency" not in near:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_imports_hidden_in_functions():
    found = [hit for top in ("onnx2hw", "sim", "boards") for p in sorted((ROOT / top).rglob("*.py"))
             for hit in _function_level_imports(p)]
    assert not found, "imports of onnx2hw modules inside functions (a sign of a layering problem): " + \
        ", ".join(found)


@pytest.mark.slow
def test_wheel_has_one_top_level_name_and_no_test_helpers(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"onnx2hw", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "onnx2hw/sim/cocotb_run.py" in names and "onnx2hw/boards/ecp5.py" in names
    assert not [n for n in names if "fixture" in n or "conftest" in n or "/tests/" in n]


@pytest.mark.slow
@pytest.mark.sim
def test_read_only_install_simulates_from_another_directory(site, tmp_path):
    require_simulator("verilator")
    subprocess.run(["chmod", "-R", "a-w", str(site)], check=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    try:
        where = subprocess.run([sys.executable, "-c", "import onnx2hw, onnx2hw.sim, onnx2hw.boards; "
                                "print(onnx2hw.__file__)"], cwd=work, env=env, capture_output=True, text=True)
        assert where.stdout.startswith(str(site)), where
        for name in ("sim", "boards"):
            r = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=work, env=env, capture_output=True)
            assert r.returncode != 0, f"`import {name}` must fail"
        r = subprocess.run([sys.executable, "-m", "onnx2hw.cli", "sim", str(EXAMPLES / "digits_mlp_int8.onnx"),
                            "--count", "2"], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr
        assert "bit-exact: 2/2 inferences" in r.stdout
        assert not list(work.iterdir()), "nothing is written into the working directory"
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(site)], check=True)


@pytest.mark.slow
@pytest.mark.synth
def test_read_only_install_builds_a_bitstream(site, tmp_path):
    """``pip install .`` (not editable), made read-only: synth for the ULX3S from another directory."""
    subprocess.run(["chmod", "-R", "a-w", str(site)], check=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    try:
        r = subprocess.run([sys.executable, "-m", "onnx2hw.cli", "synth", str(EXAMPLES / "digits_mlp_int8.onnx"),
                            "--board", "ulx3s", "-o", "out"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=1800)
        assert r.returncode == 0, r.stderr[-3000:]
        built = {p.name for p in (work / "out").iterdir()}
        assert {"accelerator.json", "report.json"} <= built and any(n.endswith(".bit") for n in built), built
        assert [p.name for p in work.iterdir()] == ["out"], "synth writes only its build directory"
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(site)], check=True)
