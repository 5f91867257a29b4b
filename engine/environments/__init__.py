"""Environments a multi-turn episode talks to (issue: agentic RL): the interface (`base`), built-in tools
and learnable games, and remote OpenEnv servers. The episode loop itself is `engine.rollout.episodes`.
"""
