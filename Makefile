# onnx2hw — everything a newcomer needs: `make demo`, `make test`, `make bench`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_WORKERS ?= 2
# One BLAS thread per process: pytest-xdist already runs one worker per core, and BLAS threads
# spinning for a core that another worker holds cost more than they give.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: install demo test test-fast test-novnni bench clean

# Create the virtual environment and install the package with its test extras.
# Re-runs only when pyproject.toml changes (the stamp is newer otherwise).
$(STAMP): pyproject.toml
	@# (a venv without pip is one whose creation was interrupted: made again)
	@$(BIN)/python -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# The main job on the bundled example: quantize the digits MLP, compile it and build a ULX3S bitstream.
demo: install
	$(BIN)/onnx2hw synth examples/digits_mlp.onnx --calib examples/digits_calib.npz --board ulx3s -o build/demo

# Whole suite (unit, sim and synth tiers). pytest exit 5 = no tests collected: a failure here.
test: install
	@$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q -rs --durations=15 ; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; exit 1; fi; exit $$rc

test-fast: install
	$(BIN)/python -m pytest -q -m "not sim and not synth and not slow"

# The tests of onnxruntime's integer kernels, on an emulated x86-64 CPU with AVX2 but no VNNI (AMD
# EPYC Rome), where those kernels saturate u8 x s8 pair sums: shows the oracle policy holds there.
# Needs qemu-x86_64 (Debian: apt-get install qemu-user); skipped with that reason otherwise.
# Only these files: qemu 7.2's FMA emulation is itself inexact (a float conv net's logits move by
# several LSB under it, in onnxruntime and NumPy alike), so float-heavy tests say nothing there.
# NumPy's AVX-512 paths are switched off (the emulated CPU has none); stderr (qemu's warnings
# about unsupported CPU features) is dropped, pytest reports on stdout.
NOVNNI_TESTS := tests/test_golden_wide_sums.py tests/test_golden_ms_ops.py tests/test_golden_ort_compute.py \
	tests/test_quant_import_qdq.py tests/test_quant_import_qop.py tests/test_layers_dense.py tests/test_layers_conv.py
test-novnni: install
	@if ! command -v qemu-x86_64 >/dev/null; then \
	  echo "skipped: qemu-x86_64 not installed (apt-get install qemu-user)"; exit 0; fi; \
	QEMU_CPU=EPYC-Rome NPY_DISABLE_CPU_FEATURES="AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR" \
	  qemu-x86_64 $(BIN)/python -m pytest -p no:xdist -q $(NOVNNI_TESTS) 2>/dev/null

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf build .pytest_cache sim_build
	@echo "(simulator builds are cached in ~/.cache/onnx2hw/sim, or \$$ONNX2HW_SIM_CACHE)"
