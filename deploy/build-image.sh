#!/usr/bin/env bash
# Build the server image from the local language images (`make images` first):
#   deploy/build-image.sh [TAG]            default tag llm-sandbox-server:latest
#   BASE=debian:trixie-slim deploy/build-image.sh   where a registry answers
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-llm-sandbox-server:latest}
python=${PYTHON:-.venv/bin/python}
[[ -x $python ]] || python=python3

# Each image's environment (PATH, PYTHONUNBUFFERED, ...) travels beside its root.
rm -rf deploy/build/roots
"$python" -m sandbox images export-rootfs --metadata-only deploy/build/roots
docker build -f deploy/Dockerfile -t "$tag" ${BASE:+--build-arg "BASE=$BASE"} .
docker image ls "$tag" --format 'built {{.Repository}}:{{.Tag}} ({{.Size}})'
