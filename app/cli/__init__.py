"""The command line: one module per verb over the core; never imported by the core or the window, which
it opens lazily (`main`).
"""
