"""The judge: test-case evaluation on top of the engine (see judge.py)."""

from .judge import Judge
from .models import Checker, Evaluation, EvaluationResult, Interactor, TestCase, TestOutcome, Verdict
from .compare import CompareMode, Comparison

__all__ = ["Checker", "CompareMode", "Comparison", "Evaluation", "EvaluationResult", "Interactor",
           "Judge", "TestCase", "TestOutcome", "Verdict"]
