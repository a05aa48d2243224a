"""MLX / mlx-lm: the only package that imports mlx (with `baselines`).
"""
