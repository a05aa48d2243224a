"""Steering as a stage: the steered run beside its unsteered twin (`steered`), vectors from prompt pairs (`pairs`)."""
