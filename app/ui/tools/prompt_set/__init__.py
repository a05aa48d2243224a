"""Prompt sets: the view, what a set runs against, and its results table.
"""
