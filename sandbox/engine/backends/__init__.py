"""Where sandboxes come from. Each backend implements ``Backend`` from ``base``."""

from .base import Backend, BackendError, ImageMissing, Sandbox, SandboxUnavailable

__all__ = ["Backend", "BackendError", "ImageMissing", "Sandbox", "SandboxUnavailable"]
