"""Run ▸ Multiverse…: where the text could go from the prompt's end or a run's step, as an icicle (`icicle`) in a
dock with its controls (`view`).
"""
