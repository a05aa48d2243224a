"""PyTorch / transformers: the only package that imports torch (with `baselines`).
"""
