"""Logit Lab: a desktop playground for watching local language models choose each token."""

__version__ = "0.1.0"
