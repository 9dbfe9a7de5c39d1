"""The decoder presets the peer scripts share: the shapes of src/models/llama_config.rs's
presets (`qwen2-0.5b`, `qwen3-0.6b`, `llama-tiny`) as Hugging Face config fields, plus `arch` and
`rope_theta`. No imports: llm_llamacpp.py reads them without torch."""

PRESETS = {
    # Qwen2-0.5B's shapes (hidden 896, 24 layers, 14 heads, 2 kv heads).
    "qwen2-0.5b": dict(arch="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                       max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_theta=1000000.0),
    # Qwen3-0.6B's shapes (hidden 1024, 28 layers, 16 heads, 8 kv heads, head_dim 128).
    "qwen3-0.6b": dict(arch="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_theta=1000000.0),
    "llama-tiny": dict(arch="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                       max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                       rope_theta=10000.0),
}
