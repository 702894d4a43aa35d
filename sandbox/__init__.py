"""A self-hosted, SandboxFusion-compatible code execution sandbox.

Layers, outermost first (each talks only to the one below it):

- ``sandbox.api``      HTTP: SandboxFusion wire models, translated to and from engine types.
- ``sandbox.engine``   Jobs, limits, outcomes, the concurrency gate; runs a job on a backend.
- ``sandbox.engine.backends``  Where containers come from (Docker).
- ``sandbox.runtimes`` The language catalogue, loaded from ``runtimes/*.toml``.
- ``sandbox.config``   One ``Settings`` object, from environment variables.
"""

__version__ = "0.1.0"
