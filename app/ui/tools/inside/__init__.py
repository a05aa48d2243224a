"""Run ▸ Inside the model: views of a step's layers (the logit lens, attention) and steering, each a tool of its own."""
