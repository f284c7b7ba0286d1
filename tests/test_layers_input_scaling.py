"""A model that scales its input before quantizing it (Brevitas' ``2x - 1``, a division, a constant
on either side): the scaling is folded into the host-side input quantizer, computed in float32 as
the model computes it, so the integer graph matches onnxruntime's spec-exact session; the driver
quantizes the same way from the build description."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import lsb_apart, run_spec
from onnx2hw import golden
from onnx2hw.build_info import build_info
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.driver import Accelerator
from onnx2hw.ir import ModelError, load
from onnx2hw.layers import dequantize_outputs, quantize_inputs
from onnx2hw.quant import to_integer_graph


def _model(steps, flatten=None, batch="N") -> onnx.ModelProto:
    """[flatten of a (1, 2, 4) input] -> steps -> QuantizeLinear(int8) -> DequantizeLinear -> Gemm(8 -> 4)
    -> Relu -> Q(uint8) -> DQ."""
    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, (4, 8)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(1 / 64, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.int8), "xz"),
             numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.05, np.float32), "ys"), numpy_helper.from_array(np.array(0, np.uint8), "yz")]
    nodes, x = [], "x"
    if flatten == "Flatten":
        nodes.append(helper.make_node("Flatten", ["x"], ["flat"], name="flatten"))
        x = "flat"
    elif flatten is not None:  # a Reshape target such as [-1, 8] or, for a fixed batch, [1, -1]
        inits.append(numpy_helper.from_array(np.array(flatten, np.int64), "shape"))
        nodes.append(helper.make_node("Reshape", ["x", "shape"], ["flat"], name="view"))
        x = "flat"
    for i, (op, c, const_first) in enumerate(steps):
        inits.append(numpy_helper.from_array(np.array(c, np.float32), f"c{i}"))
        ins = [f"c{i}", x] if const_first else [x, f"c{i}"]
        nodes.append(helper.make_node(op, ins, [f"s{i}"], name=f"scale{i}"))
        x = f"s{i}"
    nodes += [helper.make_node("QuantizeLinear", [x, "xs", "xz"], ["xq"], name="qx"),
              helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
              helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw"),
              helper.make_node("Gemm", ["xd", "wd"], ["g"], transB=1, name="fc"),
              helper.make_node("Relu", ["g"], ["r"], name="relu"),
              helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"], name="qy"),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dqy")]
    x_shape = [batch, 8] if flatten is None else [batch, 1, 2, 4]
    g = helper.make_graph(nodes, "scaled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


STEPS = {
    "2x-1": [("Mul", 2.0, False), ("Sub", 1.0, False)],
    "x/3+0.25": [("Div", 3.0, False), ("Add", 0.25, True)],
    "1-0.7x": [("Mul", 0.7, True), ("Sub", 1.0, True)],
}


@pytest.mark.parametrize("name", list(STEPS))
def test_input_scaling_is_exact_on_the_host(name):
    m = _model(STEPS[name])
    ig = to_integer_graph(load(m))
    assert len(ig.inputs[0].pre) == 2 and [type(l).__name__ for l in ig.layers] == ["Dense"]
    x = np.random.default_rng(1).uniform(-1.2, 1.2, (300, 8)).astype(np.float32)
    want_q = run_spec(_partial(m, "xq"), {"x": x})[0]           # the model's own input quantizer
    np.testing.assert_array_equal(quantize_inputs(ig, {"x": x})["x"], want_q)
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))["y"]
    lsb = lsb_apart(got, run_spec(m, {"x": x})[0], 0.05)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99
    # the driver quantizes from the build description exactly the same way
    p = compile_pipeline(ig)
    with Accelerator.open(build_info(p, "ulx3s", 75e6, 3e6), "sim", pipeline=p) as acc:
        np.testing.assert_array_equal(acc.quantize(x), want_q)


@pytest.mark.parametrize("flatten, batch", [("Flatten", "N"), ([-1, 8], "N"), ([0, 8], "N"), ([1, -1], 1)])
def test_input_flattened_before_its_quantizer(flatten, batch):
    """Brevitas' TFC flattens the float image before scaling and quantizing it: the host quantizes
    the flat vector; the driver takes the model's own (1, 2, 4) input."""
    m = _model(STEPS["2x-1"], flatten=flatten, batch=batch)
    ig = to_integer_graph(load(m))
    q = ig.inputs[0]
    assert ig.input_specs[0].shape == (8,) and q.model_shape == (1, 2, 4) and not q.nchw_to_nhwc
    n = 1 if batch == 1 else 5
    x = np.random.default_rng(3).uniform(-1, 1, (n, 1, 2, 4)).astype(np.float32)
    want_q = run_spec(_partial(m, "xq"), {"x": x})[0]
    np.testing.assert_array_equal(quantize_inputs(ig, {"x": x})["x"], want_q)
    p = compile_pipeline(ig)
    with Accelerator.open(build_info(p, "ulx3s", 75e6, 3e6), "sim", pipeline=p) as acc:
        np.testing.assert_array_equal(acc.quantize(x), want_q)
        with pytest.raises(ValueError, match=r"\(N, 1, 2, 4\)"):
            acc.quantize(x.reshape(n, 8))


def _partial(m: onnx.ModelProto, output: str) -> onnx.ModelProto:
    p = onnx.ModelProto()
    p.CopyFrom(m)
    del p.graph.output[:]
    p.graph.output.append(helper.make_tensor_value_info(output, TensorProto.INT8, ["N", 8]))
    return p


def test_scaling_that_is_not_a_scalar_is_refused():
    m = _model([("Mul", 2.0, False)])
    m.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.full(8, 2.0, np.float32), "c0"))
    with pytest.raises(ModelError, match="scale0.*finite scalar"):
        to_integer_graph(load(m))


def test_sub_elsewhere_names_the_node():
    m = _model([])
    m.graph.node.insert(len(m.graph.node) - 2, helper.make_node("Sub", ["r", "ys"], ["r2"], name="tail_sub"))
    m.graph.node[-2].input[0] = "r2"
    with pytest.raises(ModelError, match="'tail_sub'.*scaling of a model input"):
        to_integer_graph(load(m))
