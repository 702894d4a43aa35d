"""verl's own reward code for tests that point it at a server: its ``check_correctness``, from
verl installed without its training stack (``pip install --no-deps``) when it is missing."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

VERL_VERSION = "0.9.1"
VERL_MODULE = "verl.utils.reward_score.sandbox_fusion.utils"


def _forget_verl() -> None:
    for name in [n for n in sys.modules if n == "verl" or n.startswith("verl.")]:
        del sys.modules[name]


def load_check_correctness():
    """verl's package __init__ files import torch and the trainers, so stand-in packages point
    at the real folders and the real sandbox_fusion/utils.py loads (it needs only requests)."""
    with contextlib.suppress(ImportError):
        return importlib.import_module(VERL_MODULE).check_correctness  # a full verl install
    _forget_verl()  # what the failed import left half-loaded
    if importlib.util.find_spec("verl") is None:
        # --no-deps: verl's training stack (torch, ray) is not needed for check_correctness.
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--ignore-requires-python", f"verl=={VERL_VERSION}"],
                       check=True, timeout=600)
        importlib.invalidate_caches()
    root = Path(importlib.util.find_spec("verl").origin).parent
    try:
        for name, folder in (("verl", root), ("verl.utils", root / "utils"),
                             ("verl.utils.reward_score", root / "utils" / "reward_score")):
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
        return importlib.import_module(VERL_MODULE).check_correctness
    finally:
        _forget_verl()  # no stand-in outlives this; the function keeps its module
