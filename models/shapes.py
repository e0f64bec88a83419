"""Randomly initialised models shaped like real checkpoints, built from configs in code (no downloads).

`--target random:llama-3.1-8b --drafter random:llama-3.2-1b` times the machinery at the paper's scale
without weights; outputs are meaningless and acceptance is near zero."""

from __future__ import annotations


SHAPES = {
    # name: (vocab, hidden, intermediate, layers, heads, kv heads, head dim, tied embeddings)
    "llama-3.2-1b": (128256, 2048, 8192, 16, 32, 8, 64, True),
    "llama-3.1-8b": (128256, 4096, 14336, 32, 32, 8, 128, False),
    "smollm2-135m": (49152, 576, 1536, 30, 9, 3, 64, True),  # the embedded default's shape
    "tiny": (512, 64, 128, 2, 4, 2, 16, True),
}
PREFIX = "random:"
# Random heads: the shapes of public heads (config.json as the reference writes it: no rope scaling, which
# the reference's config class refuses but for linear and dynamic), and small ones for tests.
HEAD_SHAPES = {
    "llama-3.1-8b": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                     "intermediate_size": 14336, "vocab_size": 128256, "draft_vocab_size": 32000,
                     "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 2048},
    "smollm2-135m": {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
                     "intermediate_size": 1536, "vocab_size": 49152, "draft_vocab_size": 32000,
                     "rms_norm_eps": 1e-5, "rope_theta": 100000.0},
    "tiny": {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
             "vocab_size": 512, "draft_vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
             "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 1]}},  # the tiny target has 2 layers
}



def random_model(name: str, device: str, dtype, seed: int = 0):
    """A LlamaForCausalLM with the named shape, initialised on `device` directly (fast on a GPU)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if name not in SHAPES:
        from pipeline.config import ConfigError

        raise ConfigError("model", f"random:{name}: unknown random model shape {name!r}; known: "
                          f"{', '.join(SHAPES)}")
    vocab, hidden, inter, layers, heads, kv_heads, head_dim, tied = SHAPES[name]
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                         tie_word_embeddings=tied, max_position_embeddings=8192, rope_theta=500000.0,
                         bos_token_id=1, eos_token_id=0)
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval()
