"""Helpers the tests share: worker processes, scripts, tools and recording hooks."""
