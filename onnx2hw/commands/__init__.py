"""One module per CLI verb (see onnx2hw.cli)."""
