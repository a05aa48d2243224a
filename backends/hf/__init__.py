"""The tokenizer of transformers, which both framework backends use: the only package besides
`backends.torch` that imports transformers.
"""
