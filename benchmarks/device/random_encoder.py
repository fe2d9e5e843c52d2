"""A random-weight encoder of bert-base-uncased's shape in a local folder, with a
tokenizer folder's files beside it: what ``encoder=<folder>`` loads where the Hub
cannot be reached (the GPU machine). Speed and memory do not depend on the weights,
and the offline MiniLM tokenizer has bert-base-uncased's 30,522-token vocabulary.

    python3 benchmarks/device/random_encoder.py --tokenizer .device/tokenizer --out /tmp/bert-base-random

The defaults are bert-base-uncased's configuration (``BertConfig()``'s own defaults);
``--layers`` / ``--hidden`` shrink it for a CPU rehearsal of the same run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

# The tokenizer's own files; a sentence-transformers folder's modules.json, pooling
# config and weights are left behind, so the folder is a plain BERT checkpoint.
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def bert_config(layers: int = 12, hidden: int = 768):
    """bert-base-uncased's configuration (``BertConfig``'s defaults), with ``layers``
    layers of width ``hidden`` (64-wide heads, a 4 x wide feed-forward layer)."""
    from transformers import BertConfig

    return BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=max(1, hidden // 64),
                      intermediate_size=4 * hidden)


def build(tokenizer_dir: Path, out: Path, layers: int = 12, hidden: int = 768, seed: int = 0) -> Path:
    """The encoder folder ``out`` (created; refused if it exists): random weights drawn
    with ``seed``, the tokenizer files of ``tokenizer_dir``."""
    import torch
    from transformers import AutoTokenizer, BertModel

    if not (tokenizer_dir / "vocab.txt").is_file():
        raise FileNotFoundError(f"{tokenizer_dir}: no vocab.txt (a BERT word-piece tokenizer folder is needed)")
    if out.exists():
        raise FileExistsError(f"{out} exists; remove it or choose another --out")
    config = bert_config(layers, hidden)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), use_fast=True)
    if len(tokenizer) != config.vocab_size:
        raise ValueError(f"{tokenizer_dir}: {len(tokenizer)} tokens, bert-base-uncased has {config.vocab_size}")
    torch.manual_seed(seed)
    model = BertModel(config)
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # our own leftover from a killed build
    model.save_pretrained(partial)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, partial / name)
    partial.rename(out)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="folder with vocab.txt, tokenizer.json ...")
    parser.add_argument("--out", type=Path, required=True, help="the encoder folder to create")
    parser.add_argument("--layers", type=int, default=12, help="transformer layers (bert-base: 12)")
    parser.add_argument("--hidden", type=int, default=768, help="hidden size (bert-base: 768; heads = hidden / 64)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    folder = build(args.tokenizer, args.out, args.layers, args.hidden, args.seed)
    print(f"random_encoder: {args.layers} layers x {args.hidden} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
