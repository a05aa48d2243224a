"""Statistics over finished records (samples, sweeps, side-by-side columns, prompt sets), and the
Qt-free job plans that a sweep and a prompt set run by.
"""
