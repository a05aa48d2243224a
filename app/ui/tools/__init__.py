"""The Run menu's tools, each made when first opened (`registry.TOOLS`): samples, sweep, side by
side, prompt sets, beam search, speculative decoding, quantization diff, View code.
"""
