"""The sandbox as a Ray Serve application (``pip install '.[ray]'``; nothing outside this package
imports Ray).

One replica per node that carries the ``sandbox`` resource, each running ``sandbox serve``'s app
on that node's runtimes; every node's Serve proxy (:8000) is the URL for ``/run_code``,
``/v1/evaluate``, sessions and metrics; ``Sandbox`` is the handle API for code inside the
cluster. ``sandbox ray deploy`` / ``sandbox ray stop`` (``cli.py``) wrap ``deploy`` / ``stop``.
"""

from __future__ import annotations

from .deploy import DeployError, deploy, replicas, sandbox_nodes, stop
from .handle import Sandbox
from .replica import APP, DEPLOYMENT, NODE_RESOURCE

__all__ = ["APP", "DEPLOYMENT", "DeployError", "NODE_RESOURCE", "Sandbox", "deploy", "replicas",
           "sandbox_nodes", "stop"]
