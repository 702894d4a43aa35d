"""HTTP: the SandboxFusion wire protocol. The door is ``create_app()``."""

from .app import create_app

__all__ = ["create_app"]
