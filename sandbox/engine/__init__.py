"""Jobs in, results out. The door is ``Engine.run(job)``."""

from .admission import ClientGone
from .engine import ClientWatch, Engine, Overloaded
from .models import Job, JobResult, Limits, StepResult, StepStatus

__all__ = ["ClientGone", "ClientWatch", "Engine", "Overloaded", "Job", "JobResult", "Limits", "StepResult", "StepStatus"]
