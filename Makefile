# Quick start:  make serve   (installs, builds the images it needs, serves on :8080)
#               make test    (installs, builds the images, runs the whole suite)
PYTHON ?= python3
VENV   ?= .venv
# make images LANGS="cpp python": those images only. The GPU image (cuda, python_gpu; ~10 GB)
# is built only when named: make images LANGS="cuda python_gpu"
LANGS  ?=
# make images JOBS=1: one image at a time (default 3)
JOBS   ?=
# make serve HOST=0.0.0.0 PORT=9000 (default: SANDBOX_HOST / SANDBOX_PORT, else 127.0.0.1:8080)
HOST   ?=
PORT   ?=
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: install images images-list serve test test-unit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Builds the Debian trixie root (pulled, or bootstrapped when no registry answers), the
# base image and each language image, then smoke-tests them. Cached: reruns are quick.
images: $(STAMP)
	$(PY) -m sandbox images build $(if $(JOBS),--jobs $(JOBS)) $(LANGS)

images-list: $(STAMP)
	$(PY) -m sandbox images list

serve: images
	$(PY) -m sandbox serve $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

test: images
	$(PY) -m pytest

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

clean:
	rm -rf $(VENV) .pytest_cache
