"""Where weights come from: the built-in models (and the thinking model's task, `arithmetic`), local folders, hub
ids through the Hugging Face cache, the catalog and its memory check, and which models can draft for a target.
"""
