"""Deterministic workflow code: the conversation (turn lock, queue) and the turn loop."""
