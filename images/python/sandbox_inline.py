"""The matplotlib backend of session interpreters (python-session.py sets MPLBACKEND to it):
Agg's off-screen drawing, and a ``plt.show()`` that leaves the figures open for the
interpreter to return as PNG after the cell, as Jupyter's inline backend does (Agg's own
show() would warn that it cannot show anything)."""

from matplotlib.backend_bases import _Backend
from matplotlib.backends.backend_agg import _BackendAgg


@_Backend.export
class _BackendSandboxInline(_BackendAgg):
    @staticmethod
    def show(*args, **kwargs):
        pass
