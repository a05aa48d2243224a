"""llama.cpp: a GGUF file's forward on its own (quantized) weights through llama-cpp-python's C API; Logit Lab's
sampler and record run on the logits it returns. Imported lazily (it loads llama.cpp's shared library)."""
