"""Property tests of the parsers of user files: folding files, ``.npz`` data and the arrays in
them. Whatever the bytes, each returns checked values or raises one ``ModelError`` -- no other
exception, nothing unpickled."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from _paths import EXAMPLES
from onnx2hw.dataflow.fold import load_folding
from onnx2hw.ir import ModelError, load
from onnx2hw.quant.calib import InputSpec, check_arrays, check_feeds, load_npz

# derandomized: the same examples in every run and on every machine (a seed that changes between
# runs would make the suite pass on one and fail on the next)
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                  max_size=4), max_leaves=12)
_folding_like = st.dictionaries(st.text(max_size=6), st.fixed_dictionaries(
    {"pe": st.integers(-2, 64) | st.floats() | st.booleans() | st.text(max_size=3),
     "simd": st.integers(-2, 64) | st.floats() | st.none()}), max_size=4)


@SETTINGS
@given(doc=_json | _folding_like, raw=st.binary(max_size=64), use_raw=st.booleans())
def test_folding_file_is_checked_or_refused(tmp_path, doc, raw, use_raw):
    path = tmp_path / "folding.json"
    if use_raw:
        path.write_bytes(raw)
    else:
        path.write_text(json.dumps(doc))
    try:
        folding = load_folding(path)
    except ModelError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    for name, (pe, simd) in folding.items():
        assert isinstance(name, str) and type(pe) is int and type(simd) is int and pe >= 1 and simd >= 1


_arrays = hnp.arrays(dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int8, np.uint8, np.int64,
                                            np.complex64, np.bool_, np.dtype("U3"), np.dtype("S3")]),
                     shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))


def _npz_bytes(arrays: dict, junk: bytes | None = None) -> bytes:
    """``arrays`` as an .npz archive, plus a member ``junk.npy`` holding ``junk`` (not .npy data:
    numpy returns such a member as its raw bytes)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    if junk is not None:
        with zipfile.ZipFile(buf, "a") as z:
            z.writestr("junk.npy", junk)
    return buf.getvalue()


@pytest.fixture(scope="module")
def mlp_graph():
    return load(str(EXAMPLES / "digits_mlp.onnx"))


_model_shaped = hnp.arrays(dtype=st.sampled_from([np.float32, np.float64]),
                           shape=st.tuples(st.integers(1, 3), st.sampled_from([64, 63])),
                           elements=st.floats(-1e3, 1e3) | st.sampled_from([np.nan, np.inf]))


@SETTINGS
@given(arrays=st.dictionaries(st.sampled_from(["input", "x", "other"]), _arrays, max_size=2),
       shaped=st.none() | _model_shaped,
       cut=st.integers(0, 400), flip=st.integers(0, 400), damage=st.sampled_from(["none", "truncate", "flip"]),
       junk=st.none() | st.binary(max_size=16))
def test_npz_inputs_are_checked_or_refused(tmp_path, mlp_graph, arrays, shaped, cut, flip, damage, junk):
    if shaped is not None:
        arrays = {**arrays, "input": shaped}
    data = _npz_bytes(arrays, junk)
    if damage == "truncate":
        data = data[:cut]
    elif damage == "flip" and data:
        b = bytearray(data)
        b[flip % len(b)] ^= 0xFF
        data = bytes(b)
    path = tmp_path / "x.npz"
    path.write_bytes(data)
    try:
        feeds = check_feeds(load_npz(path), mlp_graph)
    except ModelError as exc:
        assert "\n" not in str(exc)
        return
    (x,) = feeds.values()
    assert list(feeds) == ["input"] and x.dtype == np.float32 and x.shape[1:] == (64,) and x.shape[0] >= 1
    assert np.all(np.isfinite(x))


def test_model_shaped_npz_is_accepted_as_float32(tmp_path, mlp_graph):
    path = tmp_path / "ok.npz"
    np.savez(path, input=np.linspace(0, 1, 128).reshape(2, 64))  # float64: converted, documented as safe
    feeds = check_feeds(load_npz(path), mlp_graph)
    assert feeds["input"].dtype == np.float32 and feeds["input"].shape == (2, 64)


def test_npz_never_unpickles(tmp_path, mlp_graph):
    path = tmp_path / "pickled.npz"
    np.savez(path, input=np.array([{"evil": 1}], dtype=object))
    with pytest.raises(ModelError, match="not a readable NumPy .npz"):
        load_npz(path)
    with zipfile.ZipFile(path) as z:
        assert z.namelist() == ["input.npy"]


_CODES = InputSpec("input", ("N", 4, 3), ("int4", -8, 7))


@SETTINGS
@given(x=_arrays | hnp.arrays(np.int64, st.tuples(st.integers(0, 2), st.just(4), st.just(3)),
                              elements=st.integers(-9, 9)),
       others=st.booleans())
def test_integer_code_inputs_are_checked_or_refused(x, others):
    """An input of integer codes (a model that takes them, ``run --raw``) takes integers of its
    type's range in its shape, and nothing else."""
    try:
        out = check_arrays({"input": x, "label": np.zeros(1)}, [_CODES], "raw input", others=others)
    except ModelError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("raw input ")
        return
    assert others and out["input"].dtype == np.int8 and out["input"].shape[1:] == (4, 3)
    assert out["input"].shape[0] >= 1 and out["input"].min() >= -8 and out["input"].max() <= 7
    np.testing.assert_array_equal(out["input"], x)
