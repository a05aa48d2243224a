"""The sampler: logits in, a token and its record out. The stages (the function of each row of
`app.core.stage_table`), the pipeline that orders them, the one-row and batched steps, the preview's
re-sampling, logit bias, presets and a thinking model's budget.
"""
