"""Editors bound to the editing state: the sampler panel and its sliders and stage list, presets,
the prompt and chat editors, the model bar and picker, logit bias, remote fields, the info panels.
"""
