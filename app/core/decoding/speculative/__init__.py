"""Speculative decoding: the draft-then-verify rounds and their rejection rule (`rounds`), and how many tokens the
draft proposes per round when the run adapts it to what drafting is measured to save (`pace`)."""
