"""Broken and mutated models end in ModelError or a good load, never another exception,
and the loader never opens a file outside the model's folder."""
from __future__ import annotations

import os
import random
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onnx2hw.ir import Graph, ModelError, load

from _ir_models import OpenWatch, model, relu_chain, vi

N_BYTE_MUTATIONS = 2000
N_FIELD_MUTATIONS = 600
EVIL_LOCATIONS = ["../secret.bin", "sub/../../secret.bin", "link.bin", "linkdir/secret.bin", "/etc/passwd",
                  "{secret}", "..\\secret.bin", "", "sub", "weights.bin\0x"]


def _seeds(secret: str) -> dict[str, onnx.ModelProto]:
    seeds = {"chain": relu_chain(3)}
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["tx"])], "then", [],
                               [helper.make_tensor_value_info("tx", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["ex"])], "else", [],
                               [helper.make_tensor_value_info("ex", TensorProto.FLOAT, None)])
    c = numpy_helper.from_array(np.array(True), "c")
    seeds["if"] = model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                        [vi("x")], [vi("y")], [c])
    f = helper.make_function("loc", "Dbl", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                             [helper.make_opsetid("", 18)])
    seeds["function"] = model([helper.make_node("Dbl", ["x"], ["t"], domain="loc", name="c1"),
                               helper.make_node("Dbl", ["t"], ["y"], domain="loc", name="c2")],
                              [vi("x")], [vi("y")], opsets={"loc": 1}, functions=[f])
    ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], data_location=TensorProto.EXTERNAL)
    ext.external_data.add(key="location", value="weights.bin")
    ext.external_data.add(key="offset", value="0")
    ext.external_data.add(key="length", value="24")
    seeds["external"] = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [ext])
    i4 = TensorProto(name="q", data_type=TensorProto.INT4, dims=[3], raw_data=bytes([0x21, 0x07]))
    seeds["int4"] = model([helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)], [],
                          [vi("y", shape=[3])], [i4], opset=21)
    return seeds


def _broken(secret: str) -> list[onnx.ModelProto]:
    """One model per rule violated."""
    out = []
    m = relu_chain(); m.ClearField("ir_version"); out.append(m)
    m = relu_chain(); m.ir_version = 2; out.append(m)
    m = relu_chain(); del m.opset_import[:]; out.append(m)
    m = relu_chain(); m.graph.node[1].domain = "not.imported"; out.append(m)
    out.append(model([helper.make_node("Gelu", ["x"], ["y"])], [vi("x")], [vi("y")], opset=18))
    m = relu_chain(); m.graph.node[2].output[0] = "t0"; out.append(m)  # defined twice
    m = relu_chain(); m.graph.node[1].input[0] = "ghost"; out.append(m)  # undefined
    m = relu_chain(); m.graph.node.reverse(); out.append(m)  # order
    m = relu_chain(); m.graph.node[0].input[0] = "t1"; out.append(m)  # cycle
    m = relu_chain(); m.graph.input[0].type.tensor_type.ClearField("shape"); out.append(m)
    m = relu_chain(); m.graph.input[0].type.tensor_type.elem_type = 0; out.append(m)
    m = relu_chain(); a = helper.make_attribute("alpha", 0.1); a.i = 1; m.graph.node[1].attribute.append(a); out.append(m)
    m = relu_chain(); m.graph.node[1].attribute.append(AttributeProto(name="alpha", type=AttributeProto.FLOAT,
                                                                       ref_attr_name="a")); out.append(m)
    out.append(model([helper.make_node("Gemm", ["", "x"], ["y"])], [vi("x")], [vi("y")]))
    for loc in EVIL_LOCATIONS:
        m = _seeds(secret)["external"]
        m.graph.initializer[0].external_data[0].value = loc.format(secret=secret)
        out.append(m)
    m = _seeds(secret)["external"]; m.graph.initializer[0].external_data[2].value = "28"; out.append(m)
    m = _seeds(secret)["external"]; m.graph.initializer[0].external_data.add(key="checksum", value="0" * 40); out.append(m)
    rec = helper.make_function("loc", "R", ["a"], ["b"], [helper.make_node("R", ["a"], ["b"], domain="loc")],
                               [helper.make_opsetid("", 18), helper.make_opsetid("loc", 1)])
    out.append(model([helper.make_node("R", ["x"], ["y"], domain="loc")], [vi("x")], [vi("y")], opsets={"loc": 1},
                     functions=[rec]))
    m = relu_chain(); m.graph.initializer[0].raw_data = b"\0" * 7; m.graph.initializer[0].ClearField("float_data"); out.append(m)
    return out


def _field_mutation(m: onnx.ModelProto, rng: random.Random, secret: str) -> None:
    g = m.graph
    names = [x for n in g.node for x in list(n.input) + list(n.output)] + ["", "ghost", "x"]
    choice = rng.randrange(14)
    if choice == 0:
        m.ir_version = rng.choice([0, 1, 2, 3, 99, -5, 2 ** 40])
    elif choice == 1 and len(m.opset_import):
        m.opset_import[0].version = rng.choice([0, 1, 7, 99, -1, 2 ** 40])
    elif choice == 2 and len(g.node):
        n = rng.choice(g.node)
        if len(n.input):
            n.input[rng.randrange(len(n.input))] = rng.choice(names)
    elif choice == 3 and len(g.node):
        n = rng.choice(g.node)
        if len(n.output):
            n.output[rng.randrange(len(n.output))] = rng.choice(names)
    elif choice == 4 and len(g.node) > 1:
        i, j = rng.sample(range(len(g.node)), 2)
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(g.node[i]); b.CopyFrom(g.node[j])
        g.node[i].CopyFrom(b); g.node[j].CopyFrom(a)
    elif choice == 5 and len(g.node):
        n = rng.choice(g.node)
        a = n.attribute.add(name=rng.choice(["alpha", "to", "then_branch", "perm", ""]))
        a.type = rng.choice(list(AttributeProto.AttributeType.values()))
        if rng.random() < 0.5:
            a.f = 1.5
        if rng.random() < 0.5:
            a.ints.extend([1, 2])
        if rng.random() < 0.3:
            a.ref_attr_name = "r"
    elif choice == 6 and len(g.initializer):
        t = rng.choice(g.initializer)
        t.data_type = rng.randrange(-1, 30)
    elif choice == 7 and len(g.initializer):
        t = rng.choice(g.initializer)
        t.dims[:] = [rng.choice([0, 1, 3, -1, 2 ** 31, 2 ** 62]) for _ in range(rng.randrange(4))]
    elif choice == 8 and len(g.initializer):
        t = rng.choice(g.initializer)
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        t.external_data.add(key="location", value=rng.choice(EVIL_LOCATIONS).format(secret=secret))
        if rng.random() < 0.5:
            t.external_data.add(key=rng.choice(["offset", "length", "checksum", "x"]),
                                value=rng.choice(["0", "-1", "99999999999999999999", "abc", "24"]))
    elif choice == 9 and len(g.node):
        g.node[rng.randrange(len(g.node))].domain = rng.choice(["ai.onnx", "loc", "zzz", "ai.onnx.ml"])
    elif choice == 10 and len(g.output):
        g.output[0].type.tensor_type.shape.dim.add().dim_value = rng.choice([-3, 0, 7])
    elif choice == 11 and len(g.node):
        g.node.append(g.node[rng.randrange(len(g.node))])
    elif choice == 12:
        m.functions.add().CopyFrom(m.functions[0] if len(m.functions) else onnx.FunctionProto(name="f", domain="loc"))
    else:
        g.node[rng.randrange(len(g.node))].op_type = rng.choice(["Relu", "Loop", "", "Nope", "If"]) if len(g.node) else ""


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(9)
    if kind >= 5:  # structure-preserving: nudge one byte or copy one byte over another
        for _ in range(rng.randint(1, 2)):
            pos = rng.randrange(len(b))
            b[pos] = (b[pos] + rng.choice([-1, 1])) % 256 if kind < 7 else b[rng.randrange(len(b))]
    elif kind == 0:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1:
        pos = rng.randrange(len(b) + 1)
        b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    elif kind == 2:
        pos = rng.randrange(len(b))
        del b[pos:pos + rng.randint(1, 16)]
    elif kind == 3:
        del b[rng.randrange(len(b)):]
    else:
        pos = rng.randrange(len(b))
        chunk = b[pos:pos + rng.randint(1, 32)]
        b[pos:pos] = chunk
    return bytes(b)


@pytest.mark.slow
def test_broken_and_mutated_models(tmp_path, summary):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    secret = str(tmp_path / "secret.bin")
    (tmp_path / "secret.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    (folder / "weights.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    os.symlink(secret, folder / "link.bin")
    os.symlink(tmp_path, folder / "linkdir")
    path = folder / "m.onnx"
    seeds = _seeds(secret)
    for m in seeds.values():  # all seeds are valid (this also warms up lazy imports)
        path.write_bytes(m.SerializeToString())
        assert isinstance(load(path), Graph)

    outcomes = {"ok": 0, "ModelError": 0}
    watch = OpenWatch()

    def attempt(data: bytes, must_fail: bool = False):
        path.write_bytes(data)
        with watch.watching():
            try:
                load(path)
            except ModelError as exc:
                msg = str(exc)
                assert "\n" not in msg and msg.startswith(str(path)), msg
                assert "internal error" not in msg, msg
                outcomes["ModelError"] += 1
                return
        assert not must_fail, "broken model loaded"
        outcomes["ok"] += 1

    start = time.perf_counter()
    broken = _broken(secret)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in broken:
            attempt(m.SerializeToString(), must_fail=True)
        rng = random.Random(20261122)
        seed_bytes = [m.SerializeToString() for m in seeds.values()]
        for _ in range(N_BYTE_MUTATIONS):
            attempt(_mutate_bytes(rng.choice(seed_bytes), rng))
        for i in range(N_FIELD_MUTATIONS):
            m = onnx.ModelProto()
            m.CopyFrom(rng.choice(list(seeds.values())))
            for _ in range(rng.randint(1, 3)):
                _field_mutation(m, rng, secret)
            attempt(m.SerializeToString())
    elapsed = time.perf_counter() - start
    outside = watch.outside(folder)
    assert outside == [], sorted(set(outside))[:5]
    opened = set(watch.paths)
    assert opened <= {os.path.realpath(path), os.path.realpath(folder / "weights.bin")}, opened
    total = len(broken) + N_BYTE_MUTATIONS + N_FIELD_MUTATIONS
    assert sum(outcomes.values()) == total
    summary("ir_robustness", f"ir: {total} broken/mutated models in {elapsed:.1f} s: {outcomes['ok']} loaded, "
                             f"{outcomes['ModelError']} ModelError, 0 other exceptions, 0 opens outside the folder")
    assert elapsed < 60
