"""Starts a Python code context of a sandbox's agent (sandbox_kernel.py); argv[1]: the fd of
its socket to the agent. Imported for the same reason as sandbox-agent.py."""
import sys

fd = int(sys.argv[1])  # before the import: the kernel gives cells an argv of their own

import sandbox_kernel  # noqa: E402

sandbox_kernel.serve(fd)
