"""Requests in, events out: the one model thread that owns the loaded models (`model_thread`), the jobs it serves
and `stream`, the one loop that reads a job (`jobs`), the runner table, one row per strategy (`runners`: plain,
speculative, together, load, score, beam, diff), and the models a runner may ask for (`context`).
"""
