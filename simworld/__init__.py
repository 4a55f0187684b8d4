"""simworld: learned world models that stand in for real environments in agent RL.

The public API lives here; the command line is `simworld` (see `simworld --help`).
"""
