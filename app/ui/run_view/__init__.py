"""The run shown: its output text, the step panel, the branch tree, token spans and the prompt's
surprisal shading.
"""
