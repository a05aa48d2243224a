"""Inside the model from the command line: `logitlab lens` and `logitlab attention` (a step's layers), and steering."""
