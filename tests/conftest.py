"""Shared test set-up: one CPU thread (tiny models run fastest and most repeatably on one)."""

import torch

torch.set_num_threads(1)
