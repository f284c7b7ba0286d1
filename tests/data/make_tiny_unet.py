"""Writes tiny_unet.onnx (committed): conv -> maxpool -> conv -> upsample x2 (Resize, nearest, as
torch exports it: asymmetric / floor) -> concat with the skip -> conv, float32, NCHW, built with
onnx.helper. Rerun: ``.venv/bin/python tests/data/make_tiny_unet.py`` (identical file)."""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_unet() -> onnx.ModelProto:
    rng = np.random.default_rng(12)

    def w(name, shape):
        fan_in = int(np.prod(shape[1:]))
        return numpy_helper.from_array(rng.normal(0, 1.2 / np.sqrt(fan_in), shape).astype(np.float32), name)

    def b(name, n):
        return numpy_helper.from_array(rng.normal(0, 0.1, n).astype(np.float32), name)

    inits = [w("w1", (4, 2, 3, 3)), b("b1", 4), w("w2", (6, 4, 3, 3)), b("b2", 6), w("w3", (3, 10, 3, 3)), b("b3", 3),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up_scales")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="enc_conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["skip"], name="enc_relu"),
        helper.make_node("MaxPool", ["skip"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="mid_conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["m"], name="mid_relu"),
        helper.make_node("Resize", ["m", "", "up_scales"], ["up"], name="upsample", mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Concat", ["up", "skip"], ["cat"], name="concat", axis=1),
        helper.make_node("Conv", ["cat", "w3", "b3"], ["y"], name="dec_conv", pads=[1, 1, 1, 1]),
    ]
    g = helper.make_graph(nodes, "tiny_unet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 8, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8,
                              producer_name="tests/data/make_tiny_unet.py")
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    onnx.save(tiny_unet(), Path(__file__).with_name("tiny_unet.onnx"))
