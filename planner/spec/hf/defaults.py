"""What a HuggingFace config leaves out, as ``transformers`` fills it in.

``TRANSFORMERS_DEFAULTS[model_type]`` holds, for every key the family's builder reads, the value the family's
``transformers`` config class gives it when ``config.json`` omits it (Gemma 3 27B omits ``vocab_size``; most
configs omit ``attention_bias``, ``use_conv_bias``, ``mlp_only_layers``...). ``TRANSFORMERS_ALIASES`` pairs a
key with the other spelling HF accepts for it (the class's ``attribute_map``). The planner may not import
``transformers`` (it is a test-only oracle), so the tables are written out here and
``tests/planner/test_hf_defaults.py`` checks every entry against the config classes themselves.

Keys left out: those whose HF default is derived rather than fixed (``num_key_value_heads`` = the query
heads, ``head_dim`` = ``hidden_size / num_attention_heads``, Mamba's ``intermediate_size`` = ``expand ×
hidden_size`` and ``time_step_rank`` ``"auto"``, GPT-2's ``n_inner`` = 4 × ``n_embd``); the builders derive
them the same way.
"""

from __future__ import annotations

_LLAMA_SHAPE = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                "num_attention_heads": 32}
_QWEN = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False, "sliding_window": 4096,
         "use_sliding_window": False, "max_window_layers": 28}
_MAMBA = {"vocab_size": 50280, "hidden_size": 768, "num_hidden_layers": 32, "tie_word_embeddings": True,
          "expand": 2, "state_size": 16, "conv_kernel": 4, "time_step_rank": "auto", "use_bias": False,
          "use_conv_bias": True}
_GPT2 = {"vocab_size": 50257, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "n_inner": None,
         "tie_word_embeddings": True}

TRANSFORMERS_DEFAULTS: dict[str, dict[str, object]] = {
    "llama": {**_LLAMA_SHAPE, "tie_word_embeddings": False},
    "mistral": {"tie_word_embeddings": False, "sliding_window": 4096},
    "mixtral": {"tie_word_embeddings": False, "router_aux_loss_coef": 0.001},
    "gemma2": {"tie_word_embeddings": True},
    "gemma3": {"tie_word_embeddings": True, "vocab_size": 262_208},
    "gemma3_text": {"tie_word_embeddings": True, "vocab_size": 262_208},
    "deepseek_v2": {"tie_word_embeddings": False, "topk_method": "greedy", "n_group": None, "topk_group": None},
    "deepseek_v3": {"tie_word_embeddings": False, "n_shared_experts": 1, "first_k_dense_replace": 3, "n_group": 8,
                    "topk_group": 4},
    "nemotron_h": {"tie_word_embeddings": False, "mlp_hidden_act": "relu2"},
    "qwen3_next": {"tie_word_embeddings": False, "decoder_sparse_step": 1, "router_aux_loss_coef": 0.001},
    "qwen3_5_moe_text": {"vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
                         "num_key_value_heads": 2, "head_dim": 256, "tie_word_embeddings": False,
                         "linear_conv_kernel_dim": 4, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                         "linear_num_value_heads": 32, "num_experts": 256, "num_experts_per_tok": 8,
                         "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
                         "router_aux_loss_coef": 0.001, "layer_types": None},
    "qwen3_5_text": {"vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
                     "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
                     "tie_word_embeddings": False, "linear_conv_kernel_dim": 4, "linear_value_head_dim": 128,
                     "linear_num_key_heads": 16, "linear_num_value_heads": 32, "layer_types": None},
    "minimax": {"tie_word_embeddings": False},
    "qwen2": _QWEN,
    "qwen3": {**_QWEN, "head_dim": 128, "attention_bias": False},
    "qwen3_moe": {**{key: value for key, value in _QWEN.items() if key != "max_window_layers"}, "hidden_size": 2048,
                  "intermediate_size": 6144, "num_hidden_layers": 24,
                  "num_key_value_heads": 4, "attention_bias": False, "num_experts": 128, "num_experts_per_tok": 8,
                  "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": None,
                  "router_aux_loss_coef": 0.001},
    "qwen2_moe": {**_QWEN, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "qkv_bias": True, "num_experts": 60,
                  "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                  "decoder_sparse_step": 1, "mlp_only_layers": None, "router_aux_loss_coef": 0.001},
    "olmo2": {"vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": None, "tie_word_embeddings": False,
              "attention_bias": False},
    "olmo3": {"vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": None, "tie_word_embeddings": False,
              "attention_bias": False, "sliding_window": 4096, "layer_types": None},
    "olmoe": {"vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
              "num_attention_heads": 16, "num_key_value_heads": None, "tie_word_embeddings": False,
              "attention_bias": False, "num_experts": 64, "num_experts_per_tok": 8, "router_aux_loss_coef": 0.01},
    "llama4_text": {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
                    "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False, "attention_bias": False,
                    "num_local_experts": 16, "num_experts_per_tok": 1, "router_aux_loss_coef": 0.001,
                    "moe_layers": None, "interleave_moe_layer_step": 1, "no_rope_layers": None,
                    "no_rope_layer_interval": 4, "attention_chunk_size": 8192, "layer_types": None},
    "phi3": {"vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
             "num_attention_heads": 32, "tie_word_embeddings": False, "sliding_window": None},
    "phimoe": {"vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
               "attention_bias": False, "sliding_window": None, "num_local_experts": 16, "num_experts_per_tok": 2,
               "router_aux_loss_coef": 0.001},
    "mamba": _MAMBA,
    "falcon_mamba": _MAMBA,
    "mamba2": {"vocab_size": 32768, "hidden_size": 4096, "num_hidden_layers": 64, "num_heads": 128, "head_dim": 64,
               "expand": 2, "state_size": 128, "conv_kernel": 4, "n_groups": 8, "tie_word_embeddings": False},
    "jamba": {"vocab_size": 65536, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False, "num_experts": 16,
              "num_experts_per_tok": 2, "router_aux_loss_coef": 0.001, "mamba_d_state": 16, "mamba_d_conv": 4,
              "mamba_expand": 2, "mamba_dt_rank": "auto", "mamba_conv_bias": True, "mamba_proj_bias": False,
              "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2, "expert_layer_offset": 1},
    "granitemoehybrid": {**_LLAMA_SHAPE, "num_key_value_heads": None, "tie_word_embeddings": False,
                         "attention_bias": False, "num_local_experts": 8, "num_experts_per_tok": 2,
                         "router_aux_loss_coef": 0.001, "shared_intermediate_size": 1024, "mamba_n_heads": 128,
                         "mamba_d_head": "auto", "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2,
                         "mamba_n_groups": 1, "layer_types": None, "position_embedding_type": None},
    "gpt_oss": {"vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "tie_word_embeddings": False,
                "attention_bias": True, "sliding_window": 128, "num_local_experts": 128, "num_experts_per_tok": 4,
                "router_aux_loss_coef": 0.001},
    "glm4_moe": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
                 "num_attention_heads": 96, "num_key_value_heads": 8, "tie_word_embeddings": False,
                 "attention_bias": False, "use_qk_norm": False, "n_routed_experts": 128, "n_shared_experts": 1,
                 "num_experts_per_tok": 8, "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "n_group": 1,
                 "topk_group": 1},
    "dots1": {"vocab_size": 152064, "hidden_size": 4608, "intermediate_size": 10944, "moe_intermediate_size": 1408,
              "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 32, "n_shared_experts": None,
              "n_routed_experts": None, "num_experts_per_tok": None, "n_group": 1, "topk_group": 1,
              "first_k_dense_replace": 0, "tie_word_embeddings": False, "attention_bias": False,
              "sliding_window": 4096, "max_window_layers": 62, "layer_types": None},
    "glm4_moe_lite": {"vocab_size": 154880, "hidden_size": 2048, "intermediate_size": 10240,
                      "moe_intermediate_size": 1536, "num_hidden_layers": 47, "num_attention_heads": 20,
                      "tie_word_embeddings": False, "n_routed_experts": 64, "n_shared_experts": 1,
                      "num_experts_per_tok": 4, "kv_lora_rank": 512, "q_lora_rank": 768, "qk_rope_head_dim": 64,
                      "qk_nope_head_dim": 192, "v_head_dim": 256, "n_group": 1, "topk_group": 1,
                      "mlp_layer_types": None},
    "smollm3": {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                "num_attention_heads": 16, "num_key_value_heads": 4, "tie_word_embeddings": True,
                "attention_bias": False, "mlp_bias": False, "use_sliding_window": False, "sliding_window": None,
                "no_rope_layers": None, "no_rope_layer_interval": 4, "layer_types": None},
    "minimax_m2": {"vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
                   "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
                   "num_local_experts": 256, "num_experts_per_tok": 8, "router_aux_loss_coef": 0.001},
    "granite": {**_LLAMA_SHAPE, "num_key_value_heads": None, "tie_word_embeddings": False, "attention_bias": False,
                "mlp_bias": False},
    "granitemoe": {**_LLAMA_SHAPE, "num_key_value_heads": None, "tie_word_embeddings": False,
                   "attention_bias": False, "num_local_experts": 8, "num_experts_per_tok": 2,
                   "router_aux_loss_coef": 0.001},
    "seed_oss": {"vocab_size": 155136, "hidden_size": 4096, "intermediate_size": 27648, "num_hidden_layers": 64,
                 "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
                 "attention_bias": True, "attention_out_bias": False, "mlp_bias": False},
    "nemotron": {"vocab_size": 256000, "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 32,
                 "num_attention_heads": 48, "num_key_value_heads": None, "head_dim": None,
                 "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "hidden_act": "relu2"},
    "arcee": {"vocab_size": 32000, "hidden_size": 2560, "intermediate_size": 18432, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": None, "head_dim": None, "tie_word_embeddings": False,
              "attention_bias": False, "mlp_bias": False, "hidden_act": "relu2"},
    "apertus": {"vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": None, "tie_word_embeddings": False,
                "attention_bias": False},
    "ernie4_5": {"vocab_size": 103424, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
                 "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128, "tie_word_embeddings": True,
                 "use_bias": False},
    "ernie4_5_moe": {"vocab_size": 103424, "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
                     "num_attention_heads": 20, "num_key_value_heads": 4, "tie_word_embeddings": True,
                     "use_bias": False, "moe_intermediate_size": 1536, "moe_k": 6, "moe_num_experts": 64,
                     "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
                     "moe_layer_interval": 1, "router_aux_loss_coef": 0.001},
    "exaone4": {"vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False,
                "sliding_window": 4096, "sliding_window_pattern": 4, "layer_types": None},
    "gpt2": _GPT2,
    "gpt_bigcode": {**_GPT2, "multi_query": True},
}
TRANSFORMERS_DEFAULTS["granitemoeshared"] = {**TRANSFORMERS_DEFAULTS["granitemoe"], "shared_intermediate_size": 0}
TRANSFORMERS_DEFAULTS["minimax_text_01"] = TRANSFORMERS_DEFAULTS["minimax_m1"] = TRANSFORMERS_DEFAULTS["minimax"]
# the text model's, under text_config
TRANSFORMERS_DEFAULTS["llama4"] = TRANSFORMERS_DEFAULTS["llama4_text"]
TRANSFORMERS_DEFAULTS["qwen3_5_moe"] = TRANSFORMERS_DEFAULTS["qwen3_5_moe_text"]
TRANSFORMERS_DEFAULTS["qwen3_5"] = TRANSFORMERS_DEFAULTS["qwen3_5_text"]

_GPT2_ALIASES = {"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
                 "n_positions": "max_position_embeddings"}

TRANSFORMERS_ALIASES: dict[str, dict[str, str]] = {
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "olmoe": {"num_local_experts": "num_experts"},
    "jamba": {"num_experts": "num_local_experts"},
    "gpt_oss": {"num_local_experts": "num_experts"},
    "minimax_m2": {"num_local_experts": "num_experts"},
    "ernie4_5_moe": {"moe_num_experts": "num_experts", "moe_k": "num_experts_per_tok"},
    "glm4_moe": {"n_routed_experts": "num_local_experts"},
    "glm4_moe_lite": {"n_routed_experts": "num_local_experts"},
    "dots1": {"n_routed_experts": "num_local_experts"},
    "granitemoehybrid": {"layer_types": "layers_block_type"},
    "gpt2": _GPT2_ALIASES,
    "gpt_bigcode": _GPT2_ALIASES,
}
