"""verl custom reward function: every test case of a sample in one /v1/evaluate request.

verl loads this file by path (custom_reward_function.path), so it only imports the installed
package (`pip install llm-sandbox-server`, or `pip install -e .` from a checkout):

    custom_reward_function:
      path: examples/verl/reward.py
      name: compute_score
      reward_kwargs: {sandbox_url: "http://sandbox:8080", language: python, timeout: 10}
"""

from sandbox.verl import compute_score

__all__ = ["compute_score"]
