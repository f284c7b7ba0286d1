"""Golden integer layer functions, one module per :mod:`onnx2hw.quant.integer_graph` layer kind.

Each module defines ``run(layer, *inputs) -> ndarray`` over int64 arrays whose leading
axis is the batch; the registry is :data:`onnx2hw.golden.integer.LAYERS`.
"""
