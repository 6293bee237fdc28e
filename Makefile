# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
# Each builds what it needs first; the stamp files make a second run skip finished installs.
SHELL := /bin/bash
PY311 ?= $(shell command -v python3.11 || echo $(HOME)/.pyenv/versions/3.11.7/bin/python3.11)
PY310 ?= $(shell ls $(HOME)/.pyenv/versions/3.10.*/bin/python3.10 2>/dev/null | tail -n 1 || command -v python3.10)
VENV := .venv
LAVA := .venv-lava
STAMP := $(VENV)/.edgesmith-installed
LAVA_STAMP := $(LAVA)/.edgesmith-installed-lava-dl
ES := $(VENV)/bin/edgesmith
PYTEST_ARGS ?=
# the suite runs in one worker per core (pytest-xdist), a test file's tests in one worker, so its module fixtures
# are built once and its tests keep their order; TEST_WORKERS=0 runs it in this process alone
TEST_WORKERS ?= auto
# wheels whose pretrained ONNX files the tests deploy, installed without dependencies: only the files are read
# (rapidocr-onnxruntime's OCR pipeline needs OpenCV, whose wheels need numpy 2)
PRETRAINED_NODEPS := rapidocr-onnxruntime==1.4.4

.PHONY: setup demo test benchmark clean-cache

setup: $(STAMP) $(LAVA_STAMP) $(VENV)/.espeak $(VENV)/.speech

# espeak-ng synthesizes the LRNN denoiser's speech locally (models/lrnn/data.py); installed only if missing
$(VENV)/.espeak: | $(STAMP)
	command -v espeak-ng || (apt-get update && apt-get install -y espeak-ng)
	@touch $@

# real recorded talkers the denoiser trains and is checked on (models/lrnn/speech.py names the packages)
$(VENV)/.speech: | $(STAMP)
	pkgs="$$($(VENV)/bin/python -c 'from edgesmith.models.lrnn.speech import PACKAGES; print(*PACKAGES)')"; \
	dpkg -s $$pkgs >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$pkgs)
	@touch $@

$(STAMP): pyproject.toml setup.py
	@test -x $(VENV)/bin/python || $(PY311) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	$(VENV)/bin/python -m pip install -q --no-deps $(PRETRAINED_NODEPS)
	@touch $@

# Lava env (Python 3.10): lava-nc 0.10 and lava-dl 0.6 (netx, SLAYER), built by `edgesmith setup lava`, the command a
# pip user runs too (its requirements are common.LAVA_REQUIREMENTS). lava-dl pins torch >=2.3.1,<2.4, which has no
# CPU-only wheel on the registry: the default wheel brings nvidia-* libraries (about 3.3 GB, 5.6 GB on disk).
$(LAVA_STAMP): | $(STAMP)
	@test -n "$(PY310)" || { echo "Python 3.10 not found: install it (pyenv install 3.10) for the Lava env"; exit 1; }
	$(ES) setup lava --into $(LAVA) --python $(PY310) --quiet
	@touch $@

demo: setup
	$(ES) demo --out runs/demo --force

test: setup
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

benchmark: setup
	$(VENV)/bin/python -m pip install -q -e '.[test,peer]' 'numpy<2'
	$(VENV)/bin/python -m pytest -q bench/benchmarks --benchmark-only --benchmark-columns=min,median,mean,stddev,rounds

clean-cache:
	rm -rf .cache
