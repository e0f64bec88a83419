"""Whether a model is on this machine, asked before any process loads it: a launcher checks once what both of
its processes would otherwise each find missing, and says it in one line. No torch here (the launcher's
start stays quick)."""

from __future__ import annotations

import os

from models import shapes
from models.options import EMBEDDED, HEAD_PREFIX, ModelOptions, head_path_spec
from pipeline.config import InputError


class ModelNotFound(InputError):
    """The model is neither a local directory nor in the local Hugging Face cache."""


def download_command(spec: str) -> str:
    """The download command of the installed huggingface_hub: `hf download` from 1.0, else huggingface-cli."""
    import huggingface_hub

    major = int(huggingface_hub.__version__.split(".")[0])
    return f"{'hf' if major >= 1 else 'huggingface-cli'} download {spec}"


def not_found(spec: str) -> str:
    """What to say of a model that is neither a directory nor in the local Hugging Face cache."""
    from huggingface_hub.constants import HF_HUB_CACHE

    return (f"model {spec!r} is neither a local directory nor in the local Hugging Face cache ({HF_HUB_CACHE}). "
            f"Download it first with `{download_command(spec)}`, pass the checkpoint's directory, or set "
            f"`allow_download`")


def check_present(options: ModelOptions) -> None:
    """Raise ModelNotFound (not_found) where the model of `options` is a Hugging Face id this machine does not
    hold and may not download: a launcher checks it once, before both processes start and each says so."""
    spec = head_path_spec(options.model).removeprefix(HEAD_PREFIX)  # a head's directory or id
    if options.is_mock or spec == "mock" or options.allow_download or spec == EMBEDDED or spec.startswith(shapes.PREFIX):
        return
    if os.path.isdir(spec):
        return  # a directory that is not a checkpoint is named by the load, with what transformers says of it
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(spec, "config.json")
    except ValueError:  # not a repository id, and no directory either
        found = None
    if not isinstance(found, str):
        raise ModelNotFound(not_found(spec))
