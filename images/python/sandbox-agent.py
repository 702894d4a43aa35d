"""Starts a sandbox's agent (sandbox_agent.py). Imported, not run as a script: the image
keeps its compiled form, and a sandbox's start-up is its create time."""
import sandbox_agent

sandbox_agent.serve()
