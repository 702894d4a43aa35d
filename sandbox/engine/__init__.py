"""Jobs in, results out. The door is ``Engine.run(job)``."""

from .engine import Engine, Overloaded
from .models import Job, JobResult, Limits, StepResult, StepStatus

__all__ = ["Engine", "Overloaded", "Job", "JobResult", "Limits", "StepResult", "StepStatus"]
