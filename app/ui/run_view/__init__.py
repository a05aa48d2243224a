"""The run shown: its output text (a thinking model's think span folded or not), the step panel, the branch tree,
token spans and the prompt's surprisal shading.
"""
