"""HTTP: the SandboxFusion wire protocol. The door is ``create_app()``."""

__all__ = ["create_app"]


def __getattr__(name: str):
    # Imported on first use, so that sandbox.client can use the wire models in .schemas
    # without loading the server (FastAPI, the Docker SDK, the engine).
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
