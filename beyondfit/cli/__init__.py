"""The command line: argv checks, Hydra's entry point, composing a run, torchrun jobs, compare."""
