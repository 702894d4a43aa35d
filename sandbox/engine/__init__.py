"""Jobs in, results out. The door is ``Engine.run(job)``."""

from .engine import Engine
from .models import Job, JobResult, Limits, StepResult, StepStatus

__all__ = ["Engine", "Job", "JobResult", "Limits", "StepResult", "StepStatus"]
