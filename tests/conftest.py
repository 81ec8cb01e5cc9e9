"""Shared test setup: everything offline, everything local, bounded in time."""

from __future__ import annotations

import os

# Before anything imports transformers / wandb / huggingface_hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


@pytest.fixture(scope="session")
def tokenizer_path() -> str:
    """Local tiny tokenizer directory (built once per machine and cached)."""
    from environments.tokenizer import local_tokenizer_path

    return local_tokenizer_path()


@pytest.fixture(scope="session")
def tokenizer(tokenizer_path):
    from environments.tokenizer import load_tokenizer

    return load_tokenizer(tokenizer_path)
