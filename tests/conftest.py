"""Shared fixtures: seeded generators, so every test draws the same numbers every run."""

import pytest
import torch


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)
