"""The constraint editor of the sampler panel: what the text must match (a JSON schema, a regular expression, a
Lark or GBNF grammar, choices, any JSON object), where the stage sits, a few examples, and validation as you type.
"""
