"""Requests in, events out: the one model thread that owns the loaded models, and the runs it
serves (plain, together, beam, speculative, diff, scoring).
"""
