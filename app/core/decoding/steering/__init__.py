"""Steering as a stage: a steered run beside its unsteered twin in one batched forward (`steered`), and the vectors
made from contrastive prompt pairs on the model thread (`pairs`)."""
