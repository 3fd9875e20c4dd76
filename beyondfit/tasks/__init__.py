"""Built-in tasks: each module builds a model, data and a loss closure, never a loop."""
