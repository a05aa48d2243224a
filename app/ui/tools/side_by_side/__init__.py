"""Side by side: the columns' forms and models, the aligned table and the per-model charts.
"""
