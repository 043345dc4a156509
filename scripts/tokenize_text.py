#!/usr/bin/env python3
"""Turns a text file into a ddpd token file with a model's own tokenizer (docs/models.md).

  .venv/bin/python scripts/tokenize_text.py MODEL_DIR TEXT OUT

MODEL_DIR holds the model's tokenizer.json (and config.json, whose vocab_size the tokens must
fit). OUT is a flat binary token file: uint16 when the vocabulary fits in 16 bits, else int32,
the two dtypes --data-dtype reads; beside it OUT.json (dtype, vocab_size, tokenizer), which the
job checks at start against --data-dtype and --vocab. It prints the flags to train on it, with
OUT's absolute path (the workers read it, from their own directories). The service itself stays
tokenizer-free; this is the preparation step, as Megatron-LM's preprocess_data.py is.
Refused, naming the file: no tokenizer.json, an empty text, a tokenizer whose vocabulary is
larger than the model's.
"""
import json
import os
import sys

import numpy as np
from tokenizers import Tokenizer

UINT16_LIMIT = 1 << 16


def fail(message):
    sys.exit(f"tokenize: {message}")


def main(model_dir, text_path, out_path):
    tokenizer_path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(tokenizer_path):
        fail(f"{tokenizer_path}: no tokenizer (the model directory must hold tokenizer.json)")
    tokenizer = Tokenizer.from_file(tokenizer_path)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    config_path = os.path.join(model_dir, "config.json")
    model_vocab = vocab
    if os.path.isfile(config_path):
        model_vocab = json.load(open(config_path)).get("vocab_size", vocab)
        if vocab > model_vocab:
            fail(f"{tokenizer_path}: the tokenizer's vocabulary ({vocab}) is larger than the "
                 f"model's vocab_size ({model_vocab}) in {config_path}")
    try:
        text = open(text_path, encoding="utf-8").read()
    except OSError as e:
        fail(f"{text_path}: {e.strerror}")
    except UnicodeDecodeError as e:
        fail(f"{text_path}: not UTF-8 text ({e.reason} at byte {e.start})")
    if not text.strip():
        fail(f"{text_path}: the text is empty")
    ids = tokenizer.encode(text).ids
    dtype, name = (np.uint16, "uint16") if model_vocab <= UINT16_LIMIT else (np.int32, "int32")
    out_path = os.path.abspath(out_path)
    np.asarray(ids, dtype=dtype).tofile(out_path)
    with open(out_path + ".json", "w") as sidecar:
        json.dump({"dtype": name, "vocab_size": vocab, "tokens": len(ids),
                   "tokenizer": os.path.abspath(tokenizer_path)}, sidecar, indent=2)
        sidecar.write("\n")
    print(f"tokenize: {len(ids)} tokens of {text_path} into {out_path} ({name}, vocabulary "
          f"{vocab}; {out_path}.json describes it); train with: --data {out_path} "
          f"--data-dtype {name}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        fail("usage: tokenize_text.py MODEL_DIR TEXT OUT")
    main(*sys.argv[1:])
