"""Code that reproduces the settings in other engines (View code), with each engine's notes.
"""
