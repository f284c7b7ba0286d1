"""External tensor data: safe resolution (CVE-2022-25882, CVE-2024-27318)."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx2hw.ir import ModelError, load

from _ir_models import OpenWatch, model, vi

W = np.arange(12, dtype=np.float32).reshape(3, 4)
V = np.array([7, -8, 9], dtype=np.int32)


def _ext(name, dims, elem, **entries):
    t = TensorProto(name=name, data_type=elem, dims=dims, data_location=TensorProto.EXTERNAL)
    for k, v in entries.items():
        t.external_data.add(key=k, value=str(v))
    return t


def _model(*tensors):
    nodes = [helper.make_node("Identity", [t.name], [f"y{i}"]) for i, t in enumerate(tensors)]
    outs = [vi(f"y{i}", t.data_type, list(t.dims)) for i, t in enumerate(tensors)]
    return model(nodes, [], outs, list(tensors))


def _write(folder, m, name="m.onnx"):
    path = folder / name
    path.write_bytes(m.SerializeToString())
    return path


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    blob = W.tobytes() + b"\0" * (4096 - W.nbytes) + V.tobytes()
    (d / "weights.bin").write_bytes(blob)
    (d / "sub").mkdir()
    (d / "sub" / "v.bin").write_bytes(V.tobytes())
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    return d


def test_external_tensors_load(folder):
    sha = hashlib.sha1((folder / "weights.bin").read_bytes()).hexdigest()
    m = _model(_ext("w", [3, 4], TensorProto.FLOAT, location="weights.bin", length=48, checksum=sha),
               _ext("v", [3], TensorProto.INT32, location="weights.bin", offset=4096, length=12),
               _ext("u", [3], TensorProto.INT32, location="sub/v.bin"))
    watch = OpenWatch()
    with watch.watching():
        g = load(_write(folder, m))
    np.testing.assert_array_equal(g.initializers["w"], W)
    np.testing.assert_array_equal(g.initializers["v"], V)
    np.testing.assert_array_equal(g.initializers["u"], V)
    assert watch.outside(folder) == []


def test_in_memory_model_needs_base_dir(folder):
    m = _model(_ext("u", [3], TensorProto.INT32, location="sub/v.bin"))
    with pytest.raises(ModelError, match="initializer 'u' uses external data.*base_dir="):
        load(m)
    np.testing.assert_array_equal(load(m, base_dir=folder).initializers["u"], V)
    with pytest.raises(ModelError, match="base_dir="):
        load(m.SerializeToString())


BAD = {
    "absolute": (dict(location="{secret}"), "absolute path"),
    "dotdot": (dict(location="../secret.bin"), r"leaves the model folder \('..'\)"),
    "nested_dotdot": (dict(location="sub/../../secret.bin"), r"leaves the model folder \('..'\)"),
    "backslash": (dict(location="..\\secret.bin"), "backslash"),
    "symlink_file": (dict(location="link.bin"), "goes through a symlink"),
    "symlink_dir": (dict(location="linkdir/secret.bin"), "goes through a symlink"),
    "missing": (dict(location="nope.bin"), "not found"),
    "directory": (dict(location="sub"), "not a regular file"),
    "no_location": (dict(offset=0), "without a 'location'"),
    "empty_location": (dict(location=""), "empty 'location'"),
    "unknown_key": (dict(location="weights.bin", where="x"), "unknown external_data key 'where'"),
    "offset_beyond": (dict(location="weights.bin", offset=10 ** 6, length=48), "offset 1000000 is beyond"),
    "range_beyond": (dict(location="weights.bin", offset=4096, length=48), "range 4096..4144 is outside"),
    "length_mismatch": (dict(location="weights.bin", length=44), "length 44 does not match shape"),
    "implicit_length_mismatch": (dict(location="weights.bin", offset=8), "length 4100 does not match"),
    "bad_offset": (dict(location="weights.bin", offset="-4"), "offset '-4' is not a non-negative integer"),
    "checksum_mismatch": (dict(location="weights.bin", length=48, checksum="0" * 40), "SHA-1 of 'weights.bin' does not match"),
    "checksum_not_hex": (dict(location="weights.bin", length=48, checksum="xyz"), "not a SHA-1 hex digest"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_external_data_rejected_without_reading(case, folder, tmp_path):
    os.symlink(tmp_path / "secret.bin", folder / "link.bin")
    os.symlink(tmp_path, folder / "linkdir")
    entries, match = BAD[case]
    entries = {k: str(v).format(secret=tmp_path / "secret.bin") for k, v in entries.items()}
    path = _write(folder, _model(_ext("w", [3, 4], TensorProto.FLOAT, **entries)))
    watch = OpenWatch()
    with watch.watching(), pytest.raises(ModelError, match=match) as info:
        load(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "initializer 'w'" in msg and "\n" not in msg
    opened = set(watch.paths)
    # only the model file itself; weights.bin only to hash it for the checksum test
    allowed = {os.path.realpath(path)}
    if case == "checksum_mismatch":
        allowed.add(os.path.realpath(folder / "weights.bin"))
    assert opened <= allowed, opened


def test_external_tensor_with_raw_data_too(folder):
    t = _ext("w", [3], TensorProto.INT32, location="sub/v.bin")
    t.raw_data = V.tobytes()
    with pytest.raises(ModelError, match="must not also hold raw_data"):
        load(_write(folder, _model(t)))


def test_external_string_tensor_rejected(folder):
    t = _ext("w", [3], TensorProto.STRING, location="sub/v.bin")
    with pytest.raises(ModelError, match="string tensors cannot use raw or external data"):
        load(_write(folder, _model(t)))


def test_external_data_in_attribute_and_subfolder_dotdot_inside(folder):
    t = _ext("", [3], TensorProto.INT32, location="sub/v.bin")
    n = helper.make_node("Constant", [], ["y"], value=t, name="const")
    g = load(_write(folder, model([n], [], [vi("y", TensorProto.INT32, [3])])))
    np.testing.assert_array_equal(g.nodes[0].attrs["value"], V)
    # even a '..' that stays inside is refused: symlinked components would make it escape
    t = _ext("", [3], TensorProto.INT32, location="sub/../sub/v.bin")
    n = helper.make_node("Constant", [], ["y"], value=t, name="const")
    with pytest.raises(ModelError, match=r"node 'const' attribute 'value'.*'\.\.'"):
        load(_write(folder, model([n], [], [vi("y", TensorProto.INT32, [3])])))
