"""Build the corpus of exporter-written ONNX models (issue #12) with the real exporters.

Run in a separate virtual environment that has the exporters, never the project's .venv:

    python3 -m venv /work/exporters-venv
    /work/exporters-venv/bin/pip install torch==2.13.0
    /work/exporters-venv/bin/pip install onnx onnxscript brevitas qonnx onnxoptimizer onnxruntime
    /work/exporters-venv/bin/pip install tensorflow-cpu tf2onnx
    /work/exporters-venv/bin/python corpus/make_corpus.py

It rewrites every generated file in corpus/ (``*.onnx``, ``*.npz``), ``manifest.json`` and the
tables in ``README.md`` between the ``corpus-table`` and ``classes-table`` markers. Seeds are
fixed: a second run gives the same models. ``make_corpus.py GROUP...`` is a trial run of some
family groups that writes no manifest; ``make_corpus.py --merge GROUP...`` runs them and replaces
only their entries in the manifest and the tables. The groups ``old-exporters`` and
``qonnx-finn`` (issue #32: older exporter generations, QONNX/FINN conventions) live in
``generations.py`` beside this script, the group ``cnn-blocks`` (issue #36: transposed and
dilated convolutions, ceil-mode and padded pools, gating and Swish, channel split and shuffle) in
``cnn_blocks.py``. ``make test`` reads the committed files only; it never
needs these exporters.
Families whose exporter is not importable are skipped with the reason printed and recorded in
the manifest's ``skipped`` list.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib.metadata
import io
import json
import logging
import os
import random
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import cnn_blocks  # the families of issue #36 (corpus/cnn_blocks.py, beside this script)
import generations  # the families of issue #32 (corpus/generations.py, beside this script)

HERE = Path(__file__).resolve().parent
SEED = 12
ENTRIES: list[dict] = []
SKIPPED: list[dict] = []
QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas", "finn")


def seed_all(seed: int = SEED) -> None:
    random.seed(seed)
    np.random.seed(seed)
    with contextlib.suppress(ImportError):
        import torch
        torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        if "tensorflow" in sys.modules:
            sys.modules["tensorflow"].random.set_seed(seed)


@contextlib.contextmanager
def quiet():
    """Exporters print progress and warnings on every call: keep the script's own output readable."""
    out, err = io.StringIO(), io.StringIO()
    for name in ("torch", "torch.onnx", "tf2onnx", "absl", "tensorflow"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                yield
            except BaseException:
                sys.__stderr__.write(out.getvalue()[-3000:] + err.getvalue()[-3000:])
                raise


# --------------------------------------------------------------------------------------------
# description of a written file: manifest entry and the patterns today's flow chokes on


def _dims(vi) -> list:
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def _io(model, which):
    inits = {t.name for t in model.graph.initializer}
    vis = model.graph.input if which == "input" else model.graph.output
    return [{"name": v.name, "dtype": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower(),
             "shape": _dims(v)} for v in vis if v.name not in inits]


def _const_values(model) -> dict:
    vals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    vals[n.output[0]] = numpy_helper.to_array(a.t)
    return vals


def patterns(model) -> list[str]:
    """What in this graph the flow of today (before #12) rejects or mishandles, found by rule."""
    g = model.graph
    ops = [n.op_type for n in g.node]
    producers = {o: n for n in g.node for o in n.output}
    consumers = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            consumers[i].append(n)
    consts = _const_values(model)
    found = []
    ins, outs = _io(model, "input"), _io(model, "output")
    # batch dimension
    for vi in ins:
        b = vi["shape"][0] if vi["shape"] else None
        if b == 1:
            found.append("fixed batch 1")
        elif isinstance(b, int):
            found.append(f"fixed batch {b}" + (" (odd)" if b % 2 else ""))
    for vi in ins + outs:
        if vi["dtype"] != "float":
            found.append(f"{vi['dtype']} graph {'input' if vi in ins else 'output'}")
        if not vi["name"].replace("_", "a").isalnum():
            found.append(f"tensor name {vi['name']!r}")
    ms = sorted({n.op_type for n in g.node if n.domain == "com.microsoft"})
    if ms:
        found.append("com.microsoft ops " + ", ".join(ms))
    # tails
    tail_ops = []
    for vi in outs:
        n = producers.get(vi["name"])
        while n is not None and n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input:
            n = producers.get(n.input[0])
        if n is not None:
            tail_ops.append(n.op_type)
    for op, what in (("Softmax", "trailing Softmax"), ("QLinearSoftmax", "trailing QLinearSoftmax"), ("LogSoftmax", "trailing LogSoftmax"),
                     ("Sigmoid", "Sigmoid head"), ("LeakyRelu", "LeakyRelu head"), ("ArgMax", "ArgMax head"),
                     ("TopK", "TopK head")):
        if op in tail_ops:
            found.append(what)
    if ops.count("LeakyRelu") > tail_ops.count("LeakyRelu"):
        found.append("LeakyRelu activations")
    acts = [op for op in ("Selu", "Elu", "HardSigmoid", "HardSwish", "PRelu", "Tanh", "Sigmoid")
            if ops.count(op) > tail_ops.count(op)]
    if acts:
        found.append("activations " + ", ".join(acts))
    shapes = {vi.name: _dims(vi) for vi in list(g.value_info) + list(g.input) + list(g.output)}
    for n in g.node:
        if n.op_type in ("Conv", "ConvInteger", "QLinearConv"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            w = n.input[3 if n.op_type == "QLinearConv" else 1]
            wshape = list(consts[w].shape) if w in consts else shapes.get(w)
            if wshape is None and w in producers and producers[w].op_type == "DequantizeLinear":
                src = producers[w].input[0]
                wshape = list(consts[src].shape) if src in consts else None
            if attrs.get("group", 1) > 1:
                found.append("depthwise Conv (group=C)" if wshape and wshape[1] == 1 else "grouped Conv")
            if wshape and len(wshape) == 3:
                found.append("1-D Conv")
        if n.op_type in ("MaxPool", "AveragePool") and len(
                next(onnx.helper.get_attribute_value(a) for a in n.attribute if a.name == "kernel_shape")) == 1:
            found.append(f"1-D {n.op_type}")
        if n.op_type == "Clip":
            found.append("Clip (ReLU6)")
        def computed(v):  # not a constant, nor a constant read through DequantizeLinear
            src = producers.get(v)
            return v not in consts and not (src is not None and src.op_type == "DequantizeLinear"
                                            and src.input[0] in consts)
        if (n.op_type == "Add" and all(computed(i) for i in n.input)) or \
                (n.op_type == "QLinearAdd" and computed(n.input[0]) and computed(n.input[3])):
            found.append("residual Add (two computed inputs)")
        if n.op_type == "Resize":
            mode = next((onnx.helper.get_attribute_value(a) for a in n.attribute if a.name == "mode"), b"nearest")
            found.append(f"Resize ({mode.decode()})")
    if "Transpose" in ops:
        found.append(f"Transpose x{ops.count('Transpose')} (NHWC layout)" if any(
            d == 3 and vi["shape"][-1] in (1, 3) for vi in ins for d in [len(vi["shape"]) - 1]) else
            f"Transpose x{ops.count('Transpose')}")
    for op in ("Squeeze", "Unsqueeze", "Flatten", "Shape", "Gather", "Concat", "Expand", "Identity",
               "BatchNormalization", "MatMul", "Cast", "Div", "Pad", "ReduceMean", "Upsample"):
        if op in ops:
            found.append(op)
    for n in g.node:
        if n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] in consts:
            shape = consts[n.input[1]].tolist()
            fixed = bool(shape) and shape[0] > 0 and len(shape) == 2
            found.append(f"Reshape {shape}" + (" (flatten with a fixed batch)" if fixed else ""))
        elif n.op_type == "Reshape":
            found.append("Reshape to a computed shape")
    # input preprocessing 2x-1: a Mul then Sub (or Add) right after the graph input
    for vi in ins:
        chain = [vi["name"]]
        for c in consumers.get(vi["name"], []):
            if c.op_type == "Reshape":
                found.append("Reshape of the float input")
                chain = list(c.output)
        for c in consumers.get(chain[0], []):
            if c.op_type == "Mul" and any(s.op_type in ("Sub", "Add") for s in consumers.get(c.output[0], [])):
                found.append("input scaling 2x-1 (Mul, Sub)")
    # TensorNorm tail: Sub, Div, Mul, Add (or folded Mul, Add) after the last MatMul/Gemm
    if len(ops) >= 4 and ops[-4:] == ["Sub", "Div", "Mul", "Add"]:
        found.append("TensorNorm tail (Sub, Div, Mul, Add)")
    elif len(ops) >= 2 and ops[-2:] == ["Mul", "Add"] and any(o in ("Quant", "BipolarQuant") for o in ops):
        found.append("affine tail (Mul, Add)")
    # QONNX specifics
    declared = {o.domain for o in model.opset_import}
    used = {n.domain for n in g.node if n.domain}
    for d in sorted(used - declared):
        found.append(f"domain {d!r} missing from opset_import")
    if "onnx.brevitas" in used:
        found.append("onnx.brevitas domain")
    if "BipolarQuant" in ops:
        found.append("BipolarQuant (bipolar activations/weights)")
    for n in g.node:
        if n.op_type == "Quant" and n.input[1] in consts and consts[n.input[1]].size > 1:
            found.append("per-channel weight scales" if n.input[0] in consts else "per-channel activation scales")
    for vi in outs:
        if vi["name"] in producers and producers[vi["name"]].op_type in ("Quant", "BipolarQuant"):
            found.append("graph ends in a quantizer (output Quant)")
    found += _generation_patterns(model, producers, consumers, consts, ins)
    # the first quantizer reached from the graph input (through Reshape, Mul, Sub, ...)
    frontier, seen_n = [vi["name"] for vi in ins], set()
    while frontier:
        v = frontier.pop(0)
        for c in consumers.get(v, []):
            if id(c) in seen_n:
                continue
            seen_n.add(id(c))
            if c.op_type in ("Quant", "QuantizeLinear"):
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in c.attribute}
                if attrs.get("narrow") == 1:
                    found.append("narrow-range input quantizer")
            elif c.op_type == "BipolarQuant":
                found.append("bipolar input quantizer")
            elif c.op_type in ("Reshape", "Mul", "Sub", "Add", "Div", "Flatten", "Transpose"):
                frontier.extend(c.output)
    # a quantized graph whose output is float after the last weighted layer
    q_ops = {"Quant", "BipolarQuant", "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
             "QGemm", "MatMulInteger", "ConvInteger"}
    if q_ops & set(ops):
        for vi in outs:
            n = producers.get(vi["name"])
            seen = 0
            while n is not None and seen < 12 and n.op_type not in q_ops | {"MatMul", "Gemm", "Conv"}:
                n = producers.get(n.input[0]) if n.input else None
                seen += 1
            if n is not None and n.op_type in ("MatMul", "Gemm", "Conv"):
                found.append("float last layer (output not quantized)")
    out = []
    for f in found:
        if f not in out:
            out.append(f)
    return out


def _generation_patterns(model, producers, consumers, consts, ins) -> list[str]:
    """What older exporter generations and QONNX/FINN conventions write (issue #32), by rule."""
    g = model.graph
    found = []
    if model.ir_version <= 4:
        found.append(f"IR version {model.ir_version}")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < 11:
        found.append(f"opset {opset}")
    if {t.name for t in g.initializer} & {i.name for i in g.input}:
        found.append("initializers listed as graph inputs")
    for n in g.node:
        if n.op_type == "Add" and any(i in consts for i in n.input) and any(
                i in producers and producers[i].op_type == "MatMul" for i in n.input):
            found.append("MatMul + Add of a constant")
        if n.op_type == "BatchNormalization":
            src = producers.get(n.input[0])
            if src is None or src.op_type not in ("Conv", "Gemm"):
                found.append(f"BatchNormalization after {src.op_type if src is not None else 'the input'}")
        if n.op_type == "Transpose" and [a.ints for a in n.attribute if a.name == "perm"][0] == [0, 2, 1]:
            found.append("Transpose perm [0, 2, 1] (NWC <-> NCW)")
        if n.domain == "qonnx.custom_op.channels_last":
            found.append(f"channels-last {n.op_type} (qonnx.custom_op.channels_last)")
    annotated = {}
    for qa in g.quantization_annotation:
        for p in qa.quant_parameter_tensor_names:
            if p.key == "finn_datatype" and p.value != "FLOAT32":
                annotated[qa.tensor_name] = p.value
    for vi in ins:
        if vi["name"] in annotated:
            found.append(f"input datatype annotation {annotated[vi['name']]} (FINN)")
    quant_outs = [o for n in g.node if n.op_type in ("Quant", "BipolarQuant") for o in n.output]
    if quant_outs and not {v.name for v in g.value_info} & set(quant_outs):
        found.append("no value_info for Quant outputs")
    # a quantized graph whose first weighted layer reads the graph input without a quantizer
    if quant_outs:
        frontier, seen = [vi["name"] for vi in ins], set()
        while frontier:
            v = frontier.pop(0)
            for c in consumers.get(v, []):
                if id(c) in seen:
                    continue
                seen.add(id(c))
                if c.op_type in ("Conv", "MatMul", "Gemm") and c.input[0] == v:
                    integer = bool(set(annotated) & {i["name"] for i in ins})
                    found.append("first layer reads the input unquantized"
                                 + (" (annotated integer input)" if integer else " (float input)"))
                elif c.op_type in ("Reshape", "Flatten", "Transpose", "Unsqueeze", "Squeeze") and c.input[0] == v:
                    frontier.extend(c.output)
    return found


def record(fname: str, family: str, kind: str, exporter: str, version: str, options: str,
           notes: str = "", data: str | None = None, check: bool = True, classes: list[int] | None = None,
           blocks: list[str] | None = None) -> None:
    """One manifest entry for corpus/``fname``; ``classes``: the classes of issue #32 the file
    exercises (entries of the families before #32 have no such field); ``blocks``: the CNN blocks of
    issue #36 it exercises (names of ``cnn_blocks.BLOCKS``; only entries of that group have the field)."""
    path = HERE / fname
    model = onnx.load(path)
    if check:  # what the exporter wrote is well formed (the damaged-on-purpose files are not)
        onnx.checker.check_model(model)
    ops = collections.Counter((f"{n.domain}:" if n.domain and n.domain != "ai.onnx" else "") + n.op_type
                              for n in model.graph.node)
    ENTRIES.append({
        "file": fname,
        "family": family,
        "kind": kind,
        "exporter": exporter,
        "exporter_version": version,
        "options": options,
        "opset_import": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": _io(model, "input"),
        "outputs": _io(model, "output"),
        "ops": dict(sorted(ops.items())),
        "patterns": patterns(model),
        "data": data,
        "notes": notes,
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    })
    if classes is not None:
        ENTRIES[-1]["classes"] = list(classes)
    if blocks is not None:
        unknown = set(blocks) - set(cnn_blocks.BLOCKS)
        assert not unknown, (fname, unknown)
        ENTRIES[-1]["blocks"] = list(blocks)
    print(f"  {fname:42s} {path.stat().st_size:8d} B  {', '.join(ENTRIES[-1]['patterns'])}")


def save_npz(name: str, **arrays) -> str:
    np.savez_compressed(HERE / name, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    return name


def _strip_doc(model):
    """Exporters put the Python source lines and stack traces in doc_string/metadata: drop them."""
    model.graph.doc_string = ""
    for n in model.graph.node:
        n.doc_string = ""
        for p in list(n.metadata_props):
            if p.key.startswith("pkg.torch") or p.key in ("namespace", "stack_trace"):
                n.metadata_props.remove(p)
    return model


def _role(n, k: int, fallback: str) -> str:
    """The name the op's schema gives input ``k`` of node ``n`` (the last one for variadic inputs)."""
    try:
        inputs = onnx.defs.get_schema(n.op_type, n.domain).inputs
        return inputs[min(k, len(inputs) - 1)].name
    except Exception:  # noqa: BLE001 - no schema (custom domain): the exporter's word
        return fallback


def tidy(path: Path, tf2onnx: bool = False) -> None:
    """Keep the exported graph as written, made repeatable: drop source text and stray external
    data files, give tf2onnx's run-dependent initializer names (``const_fold_opt__N``,
    ``scale__N``) a name from their consumer, sort the initializers by name, serialize deterministically.

    ``tf2onnx``: also the rest of what tf2onnx names differently from run to run: an initializer
    several nodes read (tf2onnx keeps one of equal constants, under the name of whichever it met
    first) is named after its first reader, and the global counters in names (``__N``) are
    renumbered in order of appearance (node order, which is stable)."""
    import re
    model = _strip_doc(onnx.load(path))
    g = model.graph
    renames, inits = {}, {t.name for t in g.initializer}
    readers = collections.Counter(i for n in g.node for i in n.input)
    for n in g.node:
        for k, i in enumerate(n.input):
            m = re.fullmatch(r"([A-Za-z_]+?)_*__\d+", i)
            if tf2onnx and not m and i in inits and i not in renames and (readers[i] > 1 or "__" in i):
                renames[i] = f"{n.name}/{_role(n, k, 'const')}{k}"
            if m and i in inits and i not in renames:
                # named after the consumer's input (tf2onnx shares one tensor between equal
                # constants, e.g. a Slice's starts and axes, under either name from run to run)
                renames[i] = f"{n.name}/{_role(n, k, m.group(1))}{k}"
    if renames:
        for t in g.initializer:
            t.name = renames.get(t.name, t.name)
        for n in g.node:
            for k, i in enumerate(n.input):
                n.input[k] = renames.get(i, i)
    if tf2onnx:
        numbers: dict[str, str] = {}
        ends = {v.name for v in list(g.input) + list(g.output)}

        def canon(name: str) -> str:
            if name in ends:
                return name
            return re.sub(r"__(\d+)", lambda mm: "__" + numbers.setdefault(mm.group(1), str(len(numbers))), name)
        for n in g.node:
            n.name = canon(n.name)
            for k, i in enumerate(n.input):
                n.input[k] = canon(i)
            for k, o in enumerate(n.output):
                n.output[k] = canon(o)
        for t in g.initializer:
            t.name = canon(t.name)
        for v in g.value_info:
            v.name = canon(v.name)
    inits = sorted(g.initializer, key=lambda t: t.name)
    del g.initializer[:]
    g.initializer.extend(inits)
    path.write_bytes(model.SerializeToString(deterministic=True))
    for extra in (path.with_suffix(".onnx.data"), Path(str(path) + ".data")):
        if extra.exists():
            extra.unlink()


# --------------------------------------------------------------------------------------------
# 1. PyTorch float models


def torch_models():
    import torch
    from torch import nn

    class MLPSoftmax(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                                     nn.Linear(32, 10), nn.Softmax(dim=1))

        def forward(self, x):
            return self.net(x)

    class CNNSoftmax(nn.Module):
        """Conv-BN-ReLU-MaxPool x2, Flatten, Linear, Softmax on 1x8x8."""
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.Softmax(dim=1))

        def forward(self, x):
            return self.head(self.features(x))

    class ViewSqueeze(nn.Module):
        """Conv, x.view(x.size(0), -1), Linear, unsqueeze(1), Linear on 3-D (MatMul+Add), squeeze(1)."""
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.fc1 = nn.Linear(256, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            h = torch.relu(self.conv(x))
            h = h.view(h.size(0), -1)
            h = torch.relu(self.fc1(h)).unsqueeze(1)
            return self.fc2(h).squeeze(1)

    class MLPSigmoid(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())

        def forward(self, x):
            return self.net(x)

    class CNNLeaky(nn.Module):
        """3x16x16 CNN with LeakyReLU activations and a LeakyReLU head."""
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.LeakyReLU(0.1), nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1), nn.LeakyReLU(0.1), nn.MaxPool2d(2))
            self.fc = nn.Linear(256, 10)
            self.act = nn.LeakyReLU(0.1)

        def forward(self, x):
            return self.act(self.fc(torch.flatten(self.features(x), 1)))

    class DSCNN(nn.Module):
        """Keyword-spotting DS-CNN (MobileNet style) on 1x16x10 MFCC frames: Conv-BN-ReLU, two
        depthwise-separable blocks (depthwise Conv group=C, BN, ReLU/ReLU6; pointwise Conv, BN,
        ReLU/ReLU6), global average pool, Linear, Softmax."""
        def __init__(self):
            super().__init__()
            c = 16
            self.stem = nn.Sequential(nn.Conv2d(1, c, (5, 3), stride=2, padding=(2, 1)), nn.BatchNorm2d(c), nn.ReLU())
            self.blocks = nn.Sequential(
                nn.Conv2d(c, c, 3, padding=1, groups=c), nn.BatchNorm2d(c), nn.ReLU(),
                nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.ReLU(),
                nn.Conv2d(c, c, 3, padding=1, groups=c), nn.BatchNorm2d(c), nn.ReLU6(),
                nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.ReLU6())
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10), nn.Softmax(dim=1))

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)))

    class ResNet(nn.Module):
        """Small ResNet on 3x16x16: stem, an identity residual block (Add skip), a strided block
        with a 1x1 projection on the skip, global average pool, Linear, Softmax."""
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.b1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                    nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
            self.b2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                    nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))
            self.proj = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2), nn.BatchNorm2d(16))
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10), nn.Softmax(dim=1))

        def forward(self, x):
            h = self.stem(x)
            h = torch.relu(self.b1(h) + h)
            h = torch.relu(self.b2(h) + self.proj(h))
            return self.head(h)

    class ConcatBranch(nn.Module):
        """Inception-style: a 1x1 and a 3x3 conv branch on 1x8x8 concatenated along channels,
        MaxPool, Conv, MaxPool, Flatten, Linear (logits)."""
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(1, 4, 1)
            self.b = nn.Conv2d(1, 4, 3, padding=1)
            self.rest = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Flatten(), nn.Linear(32, 10))

        def forward(self, x):
            return self.rest(torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], dim=1))

    class UNet(nn.Module):
        """One-level U-Net on 1x16x16: encoder Conv-ReLU, MaxPool, Conv-ReLU, nearest Upsample x2,
        Concat skip with the encoder, Conv-ReLU, 1x1 Conv to one output map (logits)."""
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
            self.mid = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                     nn.Upsample(scale_factor=2, mode="nearest"))
            self.dec = nn.Sequential(nn.Conv2d(24, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 1))

        def forward(self, x):
            e = self.enc(x)
            return self.dec(torch.cat([self.mid(e), e], dim=1))

    class Conv1dKWS(nn.Module):
        """1-D conv net for keyword spotting on 10 MFCC x 32 frames: Conv1d-BN-ReLU, MaxPool1d,
        Conv1d-ReLU, AvgPool1d, Flatten, Linear, LogSoftmax."""
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv1d(10, 16, 3, padding=1), nn.BatchNorm1d(16), nn.ReLU(), nn.MaxPool1d(2),
                nn.Conv1d(16, 16, 3, padding=1), nn.ReLU(), nn.AvgPool1d(2),
                nn.Flatten(), nn.Linear(128, 8), nn.LogSoftmax(dim=1))

        def forward(self, x):
            return self.net(x)

    class ActMLP(nn.Module):
        """MLP with SELU, ELU, PReLU (per channel), Tanh activations."""
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.SELU(), nn.Linear(32, 32), nn.ELU(),
                                     nn.Linear(32, 32), nn.PReLU(32), nn.Linear(32, 32), nn.Tanh(),
                                     nn.Linear(32, 5))

        def forward(self, x):
            return self.net(x)

    class ActCNN(nn.Module):
        """CNN on 3x8x8 with HardSwish, ReLU6 (Clip), HardSigmoid, LeakyReLU(0.2); global average
        pool, Linear (logits)."""
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.Hardswish(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU6(),
                nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.Hardsigmoid(),
                nn.Conv2d(8, 8, 3, padding=1), nn.LeakyReLU(0.2),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

        def forward(self, x):
            return self.net(x)

    class MLPArgMax(nn.Module):
        """MLP classifier returning the class index: torch.argmax(logits, dim=1) (int64 output)."""
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5))

        def forward(self, x):
            return torch.argmax(self.net(x), dim=1)

    class CNNTopK(nn.Module):
        """Small CNN on 1x8x8 returning torch.topk(logits, 3): values and int64 indices."""
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Flatten(), nn.Linear(128, 10))

        def forward(self, x):
            v, i = torch.topk(self.net(x), 3, dim=1)
            return v, i

    return {
        "mlp_softmax": (MLPSoftmax, (64,)),
        "cnn_softmax": (CNNSoftmax, (1, 8, 8)),
        "view_squeeze": (ViewSqueeze, (1, 8, 8)),
        "mlp_sigmoid": (MLPSigmoid, (16,)),
        "cnn3_leaky": (CNNLeaky, (3, 16, 16)),
        "dscnn": (DSCNN, (1, 16, 10)),
        "resnet": (ResNet, (3, 16, 16)),
        "concat_branch": (ConcatBranch, (1, 8, 8)),
        "unet": (UNet, (1, 16, 16)),
        "conv1d_kws": (Conv1dKWS, (10, 32)),
        "act_mlp": (ActMLP, (16,)),
        "act_cnn": (ActCNN, (3, 8, 8)),
        "mlp_argmax": (MLPArgMax, (16,)),
        "cnn_topk": (CNNTopK, (1, 8, 8)),
    }, randomize_stats


def build_torch():
    import torch
    models, randomize_bn = torch_models()
    ver = torch.__version__
    print(f"PyTorch {ver}")
    built = {}
    plan = {"mlp_softmax": ("dynamic", 1, 3), "cnn_softmax": ("dynamic", 1, 3),
            "view_squeeze": ("dynamic", 1, 3), "mlp_sigmoid": ("dynamic",), "cnn3_leaky": ("dynamic",),
            "dscnn": ("dynamic", 1, 3), "resnet": ("dynamic", 1), "concat_branch": ("dynamic",),
            "unet": ("dynamic", 1), "conv1d_kws": ("dynamic", 1, 3), "act_mlp": ("dynamic",),
            "act_cnn": ("dynamic",), "mlp_argmax": ("dynamic",), "cnn_topk": ("dynamic",)}
    for name, (cls, shape) in models.items():
        seed_all(SEED + len(built))
        model = randomize_bn(cls()).eval()
        x = torch.rand(32, *shape)
        with torch.no_grad():
            y = model(x)
        # a model returning several tensors (TopK's values and indices): output, output_1, ...
        ys = y if isinstance(y, tuple) else (y,)
        out_names = ["output"] + [f"output_{k}" for k in range(1, len(ys))]
        data = save_npz(f"torch_{name}.npz", input=x.numpy(), **{n: v.numpy() for n, v in zip(out_names, ys)})
        built[name] = data
        for dynamo in (False, True):
            for batch in plan[name]:
                tag = "ts" if not dynamo else "dynamo"
                btag = "dyn" if batch == "dynamic" else f"b{batch}"
                fname = f"torch_{name}_{tag}_{btag}.onnx"
                example = torch.rand(2 if batch == "dynamic" else batch, *shape)
                kwargs = dict(input_names=["input"], output_names=out_names, dynamo=dynamo)
                if dynamo:
                    kwargs["external_data"] = False
                    if batch == "dynamic":
                        kwargs["dynamic_shapes"] = ({0: torch.export.Dim("batch")},)
                elif batch == "dynamic":
                    kwargs["dynamic_axes"] = {n: {0: "batch"} for n in ["input", *out_names]}
                with quiet():
                    torch.onnx.export(model, (example,), str(HERE / fname), **kwargs)
                tidy(HERE / fname)
                opts = f"dynamo={dynamo}, " + ("batch dynamic" if batch == "dynamic" else f"batch fixed {batch}")
                if not dynamo:
                    opts += ", dynamic_axes" if batch == "dynamic" else ""
                else:
                    opts += ", dynamic_shapes Dim('batch')" if batch == "dynamic" else ""
                record(fname, "pytorch", "float", "torch.onnx.export", ver, opts, data=data,
                       notes=models[name][0].__doc__ or "")
    return built


# --------------------------------------------------------------------------------------------
# 2. onnxruntime quantize_static (QDQ and QOperator) of two PyTorch float models


_ORT_SKIP_SYMBOLIC = ("unet",)


def build_ort():
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    print(f"onnxruntime {ort.__version__}")

    class Reader(CalibrationDataReader):
        def __init__(self, x):
            self.it = iter([{"input": x[i:i + 1]} for i in range(len(x))])

        def get_next(self):
            return next(self.it, None)

    jobs = [("mlp_softmax", QuantFormat.QDQ, False), ("mlp_softmax", QuantFormat.QOperator, False),
            ("cnn_softmax", QuantFormat.QDQ, False), ("cnn_softmax", QuantFormat.QOperator, False),
            ("cnn_softmax", QuantFormat.QDQ, True),
            ("dscnn", QuantFormat.QDQ, False), ("dscnn", QuantFormat.QDQ, True), ("resnet", QuantFormat.QDQ, False),
            ("concat_branch", QuantFormat.QDQ, False), ("unet", QuantFormat.QDQ, False),
            ("conv1d_kws", QuantFormat.QDQ, False)]
    for name, fmt, per_channel in jobs:
        src = HERE / f"torch_{name}_ts_dyn.onnx"
        calib = np.load(HERE / f"torch_{name}.npz")["input"]
        ftag = "qdq" if fmt == QuantFormat.QDQ else "qop"
        fname = f"ort_{name}_{ftag}{'_perchannel' if per_channel else ''}.onnx"
        # in a scratch folder: the symbolic shape inference leaves files in the working directory
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp), quiet():
            pre = Path(tmp) / "pre.onnx"
            # its symbolic shape inference cannot follow Resize's computed sizes: skipped, as its error advises
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=name in _ORT_SKIP_SYMBOLIC)
            quantize_static(str(pre), str(HERE / fname), Reader(calib), quant_format=fmt,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            per_channel=per_channel)
        tidy(HERE / fname)
        opts = (f"quantize_static(quant_format={'QDQ' if fmt == QuantFormat.QDQ else 'QOperator'}, "
                f"activation QUInt8, weight QInt8, per_channel={per_channel}, MinMax, "
                f"32 random samples) after quant_pre_process"
                f"{'(skip_symbolic_shape=True)' if name in _ORT_SKIP_SYMBOLIC else ''}, from torch_{name}_ts_dyn.onnx")
        record(fname, "onnxruntime", "quantized", "onnxruntime.quantization", ort.__version__, opts,
               data=f"torch_{name}.npz")


# --------------------------------------------------------------------------------------------
# 3. Brevitas 0.13 QONNX: FINN's TFC and a small CNV


def randomize_stats(model):
    """``model`` in eval mode with random BatchNorm / TensorNorm statistics (not identities)."""
    import torch
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
        if type(m).__name__ == "TensorNorm":
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def build_brevitas():
    import torch
    import brevitas
    import brevitas.nn as qnn
    from brevitas.export import export_qonnx
    from brevitas_examples.bnn_pynq.models import CNV as cnv_mod
    from brevitas_examples.bnn_pynq.models.FC import FC
    from qonnx.util.cleanup import cleanup
    ver = brevitas.__version__
    qver = importlib.metadata.version("qonnx")
    print(f"Brevitas {ver}, qonnx {qver}")

    # FINN's CNV topology at corpus size: conv 16,16(pool),32,32(pool) on 3x16x16, FC 64, 64, 10
    cnv_mod.CNV_OUT_CH_POOL = [(16, False), (16, True), (32, False), (32, True)]
    cnv_mod.INTERMEDIATE_FC_FEATURES = [(32, 64), (64, 64)]
    cnv_mod.LAST_FC_IN_FEATURES = 64

    def qcnn(per_channel: bool, out_quant: bool):
        from brevitas.quant import Int8ActPerTensorFloat
        c = dict(scaling_per_output_channel=True, per_channel_broadcastable_shape=(1, 8, 1, 1),
                 scaling_stats_permute_dims=(1, 0, 2, 3)) if per_channel else {}
        w = dict(weight_bit_width=4, weight_scaling_per_output_channel=per_channel)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
                self.c1 = qnn.QuantConv2d(1, 8, 3, padding=1, **w)
                self.r1 = qnn.QuantReLU(bit_width=4, return_quant_tensor=True, **c)
                self.c2 = qnn.QuantConv2d(8, 16, 3, padding=1, **w)
                self.r2 = qnn.QuantReLU(bit_width=4, return_quant_tensor=True)
                self.fc = qnn.QuantLinear(64, 10, bias=True, **w,
                                          output_quant=Int8ActPerTensorFloat if out_quant else None)
                self.pool = torch.nn.MaxPool2d(2)

            def forward(self, x):
                h = self.pool(self.r1(self.c1(self.inp(x))))
                h = self.pool(self.r2(self.c2(h)))
                return self.fc(torch.flatten(h, 1))
        Net.__doc__ = ("QuantIdentity (int8 input), QuantConv2d 4-bit + QuantReLU 4-bit x2 with MaxPool, "
                       "QuantLinear 4-bit on 1x8x8; " +
                       ("per-channel weight scales and a per-channel activation scale (first QuantReLU); float "
                        "last layer" if per_channel else
                        "per-tensor scales; the last layer has an int8 output quantizer (the graph ends in Quant)"))
        return Net()

    def export(model, shape, stem, notes, ts=False):
        """``model``'s sample data, raw export, qonnx cleanup (and TorchScript export if ``ts``)."""
        x = torch.rand(16, *shape[1:])
        with torch.no_grad():
            y = model(x)
        data = save_npz(f"{stem}.npz", input=x.numpy(), output=y.numpy())
        raw = f"{stem}_raw.onnx"
        with quiet():
            export_qonnx(model, torch.rand(*shape), export_path=str(HERE / raw))
        tidy(HERE / raw)
        record(raw, "brevitas", "quantized", "brevitas.export.export_qonnx", ver,
               "export_qonnx default (dynamo exporter under torch 2.13), batch fixed 1", data=data, notes=notes)
        clean = f"{stem}_clean.onnx"
        with quiet():
            cleanup(str(HERE / raw), out_file=str(HERE / clean))
        tidy(HERE / clean)
        record(clean, "brevitas", "quantized", "brevitas export_qonnx + qonnx.util.cleanup",
               f"brevitas {ver}, qonnx {qver}", f"qonnx cleanup of {raw}", data=data)
        if ts:
            fts = f"{stem}_ts.onnx"
            with quiet():
                export_qonnx(model, torch.rand(*shape), export_path=str(HERE / fts), dynamo=False)
            tidy(HERE / fts)
            record(fts, "brevitas", "quantized", "brevitas.export.export_qonnx", ver,
                   "export_qonnx(dynamo=False): TorchScript exporter, batch fixed 1", data=data)

    widths = [(1, 1), (1, 2), (2, 2), (4, 4)]
    for topo in ("tfc", "cnv"):
        for wb, ab in widths:
            seed_all(SEED + 100 + wb * 10 + ab + (0 if topo == "tfc" else 50))
            if topo == "tfc":
                # FINN's TFC: in 1x8x8 (MNIST-sized down), 64-64-64-10, IN_BIT_WIDTH as in tfc_*.ini
                model = FC(num_classes=10, weight_bit_width=wb, act_bit_width=ab, in_bit_width=1 if ab == 1 else ab,
                           in_channels=1, out_features=[64, 64, 64], in_features=(8, 8))
                shape = (1, 1, 8, 8)
            else:
                model = cnv_mod.CNV(num_classes=10, weight_bit_width=wb, act_bit_width=ab, in_bit_width=8, in_ch=3)
                shape = (1, 3, 16, 16)
            randomize_stats(model)
            export(model, shape, f"brevitas_{topo}_w{wb}a{ab}",
                   f"brevitas_examples.bnn_pynq {'FC (TFC)' if topo == 'tfc' else 'CNV (shrunk)'}",
                   ts=topo == "tfc" and (wb, ab) == (2, 2))

    # hand-written Brevitas nets: QuantIdentity input quantizer, QuantConv2d + QuantReLU, QuantLinear
    for stem, per_channel, out_quant in (("brevitas_qcnn_perchannel", True, False),
                                         ("brevitas_qcnn_outquant", False, True)):
        seed_all(SEED + 300 + len(stem))
        model = qcnn(per_channel, out_quant).eval()
        export(model, (1, 1, 8, 8), stem, model.__doc__)

    # older exports: domain onnx.brevitas, and the custom domain missing from opset_import
    m = onnx.load(HERE / "brevitas_tfc_w1a1_raw.onnx")
    for n in m.graph.node:
        if n.domain in QONNX_DOMAINS:
            n.domain = "onnx.brevitas"
    for o in m.opset_import:
        if o.domain in QONNX_DOMAINS:
            o.domain = "onnx.brevitas"
    onnx.save(m, HERE / "brevitas_tfc_w1a1_onnxbrevitas.onnx")
    tidy(HERE / "brevitas_tfc_w1a1_onnxbrevitas.onnx")
    record("brevitas_tfc_w1a1_onnxbrevitas.onnx", "brevitas", "quantized", "brevitas.export.export_qonnx", ver,
           "brevitas_tfc_w1a1_raw.onnx with the custom domain renamed onnx.brevitas (as Brevitas < 0.8 wrote)",
           data="brevitas_tfc_w1a1.npz")
    for src, dst in (("brevitas_tfc_w2a2_clean.onnx", "brevitas_tfc_w2a2_noopset.onnx"),
                     ("brevitas_cnv_w1a1_clean.onnx", "brevitas_cnv_w1a1_noopset.onnx")):
        m = onnx.load(HERE / src)
        keep = [o for o in m.opset_import if o.domain not in QONNX_DOMAINS]
        del m.opset_import[:]
        m.opset_import.extend(keep)
        onnx.save(m, HERE / dst)
        tidy(HERE / dst)
        record(dst, "brevitas", "quantized", "brevitas export_qonnx + qonnx.util.cleanup", f"brevitas {ver}",
               f"{src} with the QONNX domain removed from opset_import (as older exports have)",
               data=src.replace("_clean.onnx", ".npz"), check=False)
    qonnx_oracles()


def qonnx_oracles(families=("brevitas",)):
    """The qonnx executor's outputs for the inputs of every QONNX file of ``families``, added to
    its ``.npz``: the independent oracle of tests/test_corpus.py. ``oracle`` is the first file's
    (the raw export); a file sharing the ``.npz`` whose outputs differ from it in any bit gets
    ``oracle_<stem>``."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    def run(fname, x):
        model = ModelWrapper(str(HERE / fname))
        iname, oname = model.graph.input[0].name, model.graph.output[0].name
        with quiet():  # the models fix batch 1: one sample at a time
            try:
                execute_onnx(model, {iname: x[:1]})
            except Exception:  # noqa: BLE001 - "Found unspecified tensor shapes" (TorchScript export)
                model = model.transform(InferShapes())
            return np.concatenate([execute_onnx(model, {iname: x[i:i + 1]})[oname] for i in range(len(x))])

    groups = collections.defaultdict(list)
    for e in ENTRIES:
        if e["family"] in families:
            groups[e["data"]].append(e["file"])
    for data, files in groups.items():
        with np.load(HERE / data) as d:
            arrays = {k: d[k] for k in d.files}
        oracle = None
        for fname in files:
            y = run(fname, arrays["input"])
            if oracle is None:
                oracle = arrays["oracle"] = y
            elif not np.array_equal(y, oracle):
                arrays[f"oracle_{Path(fname).stem}"] = y
        extra = sorted(k for k in arrays if k.startswith("oracle_"))
        print(f"  {data:42s} qonnx executor on {len(files)} files; max |oracle - framework| "
              f"{np.abs(oracle - arrays['output']).max():.3g}" + (f"; own oracles: {', '.join(extra)}" if extra else ""))
        save_npz(data, **arrays)


# --------------------------------------------------------------------------------------------
# 4. Keras / TFLite through tf2onnx


def build_keras():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tf2onnx
    import keras
    tf.keras.utils.set_random_seed(SEED)
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, tf2onnx {tf2onnx.__version__}")
    tv = f"tf2onnx {tf2onnx.__version__} (TensorFlow {tf.__version__}, Keras {keras.__version__})"

    def cnn():
        return keras.Sequential([
            keras.Input((16, 16, 3), name="input"),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(10, activation="softmax"),
        ])

    def mlp():
        return keras.Sequential([
            keras.Input((64,), name="input"),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ])

    def dscnn():
        """DS-CNN as in the tiny-ML keyword-spotting reference (shrunk): Conv2D-BN-ReLU, two
        DepthwiseConv2D-BN-ReLU + 1x1 Conv2D-BN-ReLU blocks, GlobalAveragePooling2D, Dense softmax."""
        L = keras.layers
        layers = [keras.Input((16, 10, 1), name="input"), L.Conv2D(16, (5, 3), strides=2, padding="same"),
                  L.BatchNormalization(), L.ReLU()]
        for _ in range(2):
            layers += [L.DepthwiseConv2D(3, padding="same"), L.BatchNormalization(), L.ReLU(),
                       L.Conv2D(16, 1), L.BatchNormalization(), L.ReLU()]
        layers += [L.GlobalAveragePooling2D(), L.Dense(10, activation="softmax")]
        return keras.Sequential(layers)

    def conv1d():
        """1-D conv net on 32 frames x 10 MFCC (channels last): Conv1D-ReLU, MaxPooling1D,
        Conv1D-ReLU, AveragePooling1D, Flatten, Dense softmax."""
        L = keras.layers
        return keras.Sequential([
            keras.Input((32, 10), name="input"), L.Conv1D(16, 3, padding="same", activation="relu"),
            L.MaxPooling1D(2), L.Conv1D(16, 3, padding="same", activation="relu"), L.AveragePooling1D(2),
            L.Flatten(), L.Dense(8, activation="softmax")])

    def resnet():
        """ResNet block as in the tiny-ML image-classification reference (shrunk): Conv2D-BN-ReLU,
        Conv2D-BN-ReLU-Conv2D-BN + skip (Add), ReLU, GlobalAveragePooling2D, Dense softmax."""
        L = keras.layers
        inp = keras.Input((16, 16, 3), name="input")
        h = L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 3, padding="same")(inp)))
        r = L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 3, padding="same")(h)))
        r = L.BatchNormalization()(L.Conv2D(8, 3, padding="same")(r))
        h = L.ReLU()(L.Add()([h, r]))
        out = L.Dense(10, activation="softmax")(L.GlobalAveragePooling2D()(h))
        return keras.Model(inp, out)

    rng = np.random.default_rng(SEED)
    everything = ("tf2onnx", "tflite_float", "tflite_int8")
    for name, build, shape, variants in (
            ("cnn_softmax", cnn, (16, 16, 3), everything), ("mlp_softmax", mlp, (64,), everything),
            ("dscnn", dscnn, (16, 10, 1), ("tf2onnx", "tflite_int8")),
            ("conv1d", conv1d, (32, 10), ("tf2onnx", "tflite_int8")),
            ("resnet", resnet, (16, 16, 3), ("tflite_int8",))):
        tf.keras.utils.set_random_seed(SEED)
        model = build()
        x = rng.random((32, *shape), dtype=np.float32)
        # a brief fit on random labels so the weights are not the initializer's
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        model.fit(x, rng.integers(0, model.output_shape[-1], 32), epochs=2, verbose=0)
        y = model.predict(x, verbose=0)
        data = save_npz(f"keras_{name}.npz", input=x, output=y)
        spec = (tf.TensorSpec((None, *shape), tf.float32, name="input"),)

        # Keras -> tf2onnx: Keras 3 models go through tf.function (from_keras needs tf_keras)
        fname = f"keras_{name}_tf2onnx.onnx"

        @tf.function(input_signature=spec)
        def fn(inp):
            return {"output": model(inp)}
        if "tf2onnx" in variants:
            with quiet():
                tf2onnx.convert.from_function(fn, input_signature=spec, opset=13, output_path=str(HERE / fname))
            tidy(HERE / fname, tf2onnx=True)
            record(fname, "keras", "float", "tf2onnx.convert.from_function", tv,
                   "Keras 3 model called in a tf.function, opset=13, batch dynamic", data=data,
                   notes=build.__doc__ or "")

        # Keras -> TFLite float -> tf2onnx --tflite
        if "tflite_float" in variants:
            conv = tf.lite.TFLiteConverter.from_keras_model(model)
            with quiet():
                tfl = conv.convert()
            fname = f"tflite_{name}_float.onnx"
            _tflite_to_onnx(tf2onnx, tfl, fname)
            record(fname, "tflite", "float", "tf2onnx.convert.from_tflite", tv,
                   "TFLiteConverter.from_keras_model (float), opset=13", data=data)

        # Keras -> TFLite full-integer int8 -> tf2onnx (QDQ around float ops by default)
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = lambda: ([x[i:i + 1]] for i in range(len(x)))
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
        with quiet():
            tfl = conv.convert()
        fname = f"tflite_{name}_int8.onnx"
        _tflite_to_onnx(tf2onnx, tfl, fname)
        # the int8 model takes int8: the inputs quantized with the TFLite input's (scale, zero point),
        # and what the TFLite interpreter computes for them
        with quiet():
            interp = tf.lite.Interpreter(model_content=tfl)
            interp.allocate_tensors()
        din, dout = interp.get_input_details()[0], interp.get_output_details()[0]
        s_in, z_in = din["quantization"]
        xq = np.clip(np.round(x / np.float32(s_in)) + z_in, -128, 127).astype(np.int8)
        yq = []
        for i in range(len(x)):
            interp.set_tensor(din["index"], xq[i:i + 1])
            interp.invoke()
            yq.append(interp.get_tensor(dout["index"]).copy())
        save_npz(data, input=x, output=y, input_int8=xq, output_tflite_int8=np.concatenate(yq))
        record(fname, "tflite", "quantized", "tf2onnx.convert.from_tflite", tv,
               "TFLiteConverter int8 (Optimize.DEFAULT, representative_dataset of 32 random samples, "
               "TFLITE_BUILTINS_INT8, int8 input and output), opset=13", data=data, notes=build.__doc__ or "")


def _tflite_to_onnx(tf2onnx, tflite: bytes, fname: str) -> None:
    """A TFLite flatbuffer through tf2onnx (opset 13) into corpus/``fname``, tidied."""
    with tempfile.TemporaryDirectory() as tmp, quiet():
        p = Path(tmp) / "m.tflite"
        p.write_bytes(tflite)
        tf2onnx.convert.from_tflite(str(p), opset=13, output_path=str(HERE / fname))
    tidy(HERE / fname, tf2onnx=True)


# --------------------------------------------------------------------------------------------


TABLE_BEGIN = "<!-- corpus-table:begin (written by make_corpus.py) -->"
TABLE_END = "<!-- corpus-table:end -->"


CLASSES_BEGIN = "<!-- classes-table:begin (written by make_corpus.py) -->"
CLASSES_END = "<!-- classes-table:end -->"


BLOCKS_BEGIN = "<!-- blocks-table:begin (written by make_corpus.py) -->"
BLOCKS_END = "<!-- blocks-table:end -->"


def _replace_between(text: str, begin: str, end: str, lines: list[str]) -> str:
    a, b = text.index(begin), text.index(end) + len(end)
    return text[:a] + "\n".join(lines) + text[b:]


def write_readme():
    lines = [TABLE_BEGIN, "", "| file | family | kind | exporter, version, options | input → output | what today's flow chokes on |",
             "|---|---|---|---|---|---|"]
    for e in ENTRIES:
        io_ = "; ".join(f"`{i['name']}` {i['shape']}" for i in e["inputs"]) + " → " + \
            "; ".join(f"`{o['name']}` {o['shape']}" for o in e["outputs"])
        lines.append(f"| `{e['file']}` | {e['family']} | {e['kind']} | {e['exporter']} {e['exporter_version']}: "
                     f"{e['options']} | {io_} | {'; '.join(e['patterns']) or '–'} |")
    if SKIPPED:
        lines += ["", "Skipped families:", ""] + [f"- {s['family']}: {s['reason']}" for s in SKIPPED]
    lines += ["", TABLE_END]
    readme = HERE / "README.md"
    text = readme.read_text() if readme.exists() else f"# Corpus\n\n{TABLE_BEGIN}\n{TABLE_END}\n"
    text = _replace_between(text, TABLE_BEGIN, TABLE_END, lines)
    if CLASSES_BEGIN in text:
        rows = [CLASSES_BEGIN, "", "| file | classes of #32 | family | written by |", "|---|---|---|---|"]
        rows += [f"| `{e['file']}` | {', '.join(map(str, e['classes']))} | {e['family']} | {e['exporter']} |"
                 for e in ENTRIES if e.get("classes")]
        text = _replace_between(text, CLASSES_BEGIN, CLASSES_END, rows + ["", CLASSES_END])
    if BLOCKS_BEGIN in text:
        rows = [BLOCKS_BEGIN, "", "| file | blocks of #36 | family | written by |", "|---|---|---|---|"]
        rows += [f"| `{e['file']}` | {', '.join(e['blocks'])} | {e['family']} | {e['exporter']} |"
                 for e in ENTRIES if e.get("blocks")]
        text = _replace_between(text, BLOCKS_BEGIN, BLOCKS_END, rows + ["", BLOCKS_END])
    readme.write_text(text)


def _merge_manifest(ran: set[str]) -> None:
    """``ENTRIES`` of this run in place of the manifest's entries of the families ``ran`` wrote;
    every other entry (and its file) as it is. A file of those families that this run no longer
    writes is deleted with its data file when nothing else reads that."""
    old = json.loads((HERE / "manifest.json").read_text())
    new_files = {e["file"] for e in ENTRIES}
    kept = [e for e in old["files"] if e["family"] not in ran]
    for e in old["files"]:
        if e["family"] in ran and e["file"] not in new_files:
            (HERE / e["file"]).unlink(missing_ok=True)
    used = {e["data"] for e in kept + ENTRIES if e["data"]}
    for e in old["files"]:
        if e["family"] in ran and e["data"] and e["data"] not in used:
            (HERE / e["data"]).unlink(missing_ok=True)
    skipped = [s for s in old["skipped"] if s["family"] not in ran] + SKIPPED
    ENTRIES[:] = kept + ENTRIES
    SKIPPED[:] = skipped


def main():
    if os.environ.get("PYTHONHASHSEED") != "0":
        # tf2onnx names constant-folded tensors in set order: fix hashing so the names repeat
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    args = sys.argv[1:]
    merge = "--merge" in args
    # family groups named: a trial run that writes no manifest, or with --merge one that puts
    # their entries into the manifest in place of their previous ones, keeping all others
    only = [a for a in args if a != "--merge"]
    if merge and not only:
        sys.exit("--merge needs the family groups to run, e.g. make_corpus.py --merge old-exporters qonnx-finn")
    if not only:
        for p in list(HERE.glob("*.onnx")) + list(HERE.glob("*.npz")) + list(HERE.glob("*.data")):
            p.unlink()
    # group name, builder, the manifest families it writes
    families = [("pytorch", build_torch, ("pytorch",)), ("onnxruntime", build_ort, ("onnxruntime",)),
                ("brevitas", build_brevitas, ("brevitas",)), ("keras/tflite", build_keras, ("keras", "tflite")),
                ("old-exporters", lambda: generations.build_old_exporters(sys.modules[__name__]),
                 generations.FLOAT_FAMILIES),
                ("qonnx-finn", lambda: generations.build_qonnx_conventions(sys.modules[__name__]),
                 generations.QONNX_FAMILIES),
                ("cnn-blocks", lambda: cnn_blocks.build_cnn_blocks(sys.modules[__name__]), cnn_blocks.FAMILIES)]
    unknown = set(only) - {f for f, _, _ in families}
    if unknown:
        sys.exit(f"unknown family group(s) {sorted(unknown)}; known: {[f for f, _, _ in families]}")
    ran: set[str] = set()
    for family, fn, writes in families:
        if only and family not in only:
            continue
        ran.update(writes)
        ran.add(family)  # the manifest's skipped list names groups
        try:
            fn()
        except ImportError as exc:
            SKIPPED.append({"family": family, "reason": f"exporter not importable: {exc}"})
            print(f"skipped {family}: {exc}")
    for p in HERE.glob("*.data"):
        p.unlink()
    if only and not merge:
        return
    if merge:
        _merge_manifest(ran)
    manifest = {"generator": "corpus/make_corpus.py", "seed": SEED, "files": ENTRIES, "skipped": SKIPPED}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    write_readme()
    total = sum(e["bytes"] for e in ENTRIES) + sum(p.stat().st_size for p in HERE.glob("*.npz"))
    print(f"{len(ENTRIES)} models, {total / 1e6:.2f} MB with data")


if __name__ == "__main__":
    main()
