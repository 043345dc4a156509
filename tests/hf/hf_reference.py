"""transformers' side of ddpd's Hugging Face tests (tests/multirank/hf_model_test.cpp).

  hf_reference.py make KIND DIR        a tiny random model of KIND saved by transformers
                                       (save_pretrained: config.json, model.safetensors), and
                                       DIR/eval.u16, random uint16 tokens of its vocabulary
  hf_reference.py tokenizer DIR TEXT   a byte-level BPE tokenizer of the fixtures' vocabulary,
                                       trained offline on TEXT by PyPI's tokenizers, saved into
                                       DIR as transformers does (tokenizer.json,
                                       tokenizer_config.json, ...)
  hf_reference.py loss DIR TOKENS C W  transformers' mean next-token cross-entropy over the first
                                       W windows of TOKENS in file order (window k is tokens
                                       [k(C+1), (k+1)(C+1)), as ddpd's --eval-order file), in
                                       float64; prints {"loss": ...}
  hf_reference.py compare A B          every tensor of A's and B's weights, read by
                                       safetensors.torch.load_file, bitwise; prints
                                       {"tensors": n, "unequal": [...], "missing": [...]}
  hf_reference.py dcp DIR              DIR's weights through torch.distributed.checkpoint.load with
                                       HuggingFaceStorageReader, compared with load_file's;
                                       prints {"tensors": n, "unequal": [...]}

No model is downloaded: every fixture is generated here, offline, from a seeded generator.

float64: transformers' Llama and Qwen2 RMSNorm cast their input to float32 whatever its dtype
(a downcast for float64), and its loss casts logits to float32. The reference patches the norm
to compute in the input's dtype and computes the loss itself, so both sides run float64 end to
end; the RoPE tables are float32 in both (transformers computes them so, and so does ddpd).
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

FIXTURES = {
    # Llama with grouped-query attention (2 query heads per KV head) and tied embeddings.
    "llama_gqa_tied": ("llama", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2,
                                     tie_word_embeddings=True)),
    # Qwen2: q/k/v biases, untied head.
    "qwen2_bias": ("qwen2", dict(hidden_size=64, intermediate_size=80, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 tie_word_embeddings=False)),
    # Multi-query attention (one KV head), untied.
    "mqa_untied": ("llama", dict(hidden_size=48, intermediate_size=64, num_hidden_layers=3,
                                 num_attention_heads=4, num_key_value_heads=1,
                                 tie_word_embeddings=False)),
    # 3 heads of width 18 in a hidden size of 54: no power of two above 2 divides the head
    # width, the head count or the hidden size.
    "odd_heads": ("llama", dict(hidden_size=54, intermediate_size=90, num_hidden_layers=2,
                                num_attention_heads=3, num_key_value_heads=3, head_dim=18,
                                tie_word_embeddings=False)),
    # Large enough (19.0 M parameters, 76 MB in float32) that a rank's resident memory shows
    # whether fsdp's import holds its share or the whole model: its largest tensor (3.1 MB) and
    # the process's own allocations are small beside either.
    "memory_wide": ("llama", dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=6,
                                  num_attention_heads=8, num_key_value_heads=4,
                                  tie_word_embeddings=True)),
}
VOCAB = 300
EVAL_TOKENS = 4096


def make(kind, out_dir):
    model_type, shape = FIXTURES[kind]
    config = transformers.AutoConfig.for_model(model_type, vocab_size=VOCAB, rms_norm_eps=1e-5,
                                               max_position_embeddings=512, **shape)
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        # Every parameter random and distinct (norm gains and biases too), so a swapped name or
        # a wrong layout cannot go unnoticed.
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    model.save_pretrained(out_dir)
    rng = np.random.default_rng(99)
    rng.integers(0, VOCAB, EVAL_TOKENS, dtype=np.uint16).tofile(os.path.join(out_dir, "eval.u16"))
    print(json.dumps({"dir": out_dir, "transformers": transformers.__version__}))


def tokenizer(out_dir, text_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([text_path], trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(out_dir)
    print(json.dumps({"dir": out_dir, "vocab": tok.get_vocab_size()}))


def float64_norm(norm):
    def forward(hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return norm.weight * (hidden_states * torch.rsqrt(variance + norm.variance_epsilon))
    return forward


def load_float64(model_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float64, attn_implementation="sdpa")
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = float64_norm(module)
    return model.eval()


def loss(model_dir, tokens_path, context, windows):
    model = load_float64(model_dir)
    tokens = np.fromfile(tokens_path, dtype=np.uint16).astype(np.int64)
    rows = torch.from_numpy(tokens[: windows * (context + 1)]).view(windows, context + 1)
    with torch.no_grad():
        logits = model(input_ids=rows[:, :-1]).logits
        value = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1))
    print(json.dumps({"loss": value.item(), "dtype": str(logits.dtype),
                      "torch": torch.__version__, "transformers": transformers.__version__}))


def weights_of(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return load_file(os.path.join(model_dir, "model.safetensors"))
    out = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        out.update(load_file(os.path.join(model_dir, shard)))
    return out


def compare(a_dir, b_dir):
    a, b = weights_of(a_dir), weights_of(b_dir)
    unequal = [n for n in a if n in b and (a[n].dtype != b[n].dtype or not torch.equal(a[n], b[n]))]
    missing = sorted(set(a) ^ set(b))
    print(json.dumps({"tensors": len(a), "unequal": unequal, "missing": missing}))


def dcp(model_dir):
    import torch.distributed.checkpoint as dist_cp
    expected = weights_of(model_dir)
    state = {name: torch.zeros_like(t) for name, t in expected.items()}
    dist_cp.load(state, storage_reader=dist_cp.HuggingFaceStorageReader(path=model_dir))
    unequal = [n for n in expected if not torch.equal(state[n], expected[n])]
    print(json.dumps({"tensors": len(state), "unequal": unequal}))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "make":
        make(args[0], args[1])
    elif command == "tokenizer":
        tokenizer(args[0], args[1])
    elif command == "loss":
        loss(args[0], args[1], int(args[2]), int(args[3]))
    elif command == "compare":
        compare(args[0], args[1])
    elif command == "dcp":
        dcp(args[0])
    else:
        sys.exit(f"hf_reference.py: unknown command {command!r}")
