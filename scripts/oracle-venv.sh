#!/usr/bin/env bash
# The test environment: a virtual environment over Debian's python3 that sees Debian's torch and
# numpy (--system-site-packages) and adds from PyPI the pinned transformers and tokenizers (the
# Hugging Face oracle: tests labelled oracle compare against their classes), tensorboard (its
# event reader checks tidal's event files) and pytest (the Python package's tests, label python).
# megatron-core (its indexed datasets' reader and builder: the oracle of data/indexed_dataset.h)
# goes in without its dependencies: only megatron/core/datasets' modules are loaded, beside
# Debian's torch (tests/oracle/megatron_reference.py).
# peft (its LoRA: the oracle of nn/lora.h) goes in the same way, beside accelerate, which it imports.
# Safe to re-run.
# The environment lives in $TIDAL_ORACLE_VENV (default ~/.cache/tidal/oracle-venv).
set -euo pipefail
venv="${TIDAL_ORACLE_VENV:-$HOME/.cache/tidal/oracle-venv}"
pins=(transformers==4.40.2 "tokenizers>=0.19,<0.20" "safetensors>=0.4.3" "huggingface-hub<1.0" "numpy<2"
      tensorboard==2.21.0 "pytest>=7,<9" "jinja2>=3,<4" psutil pyyaml)
# peft (LoRA's oracle) and accelerate, which it imports, without their dependencies: they would
# replace Debian's torch; jinja2 above writes PEFT's model card, psutil and pyyaml are accelerate's.
peft=(peft==0.11.1 accelerate==0.30.1)
megatron=megatron-core==0.6.0
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import transformers, tokenizers, torch, tensorboard, pytest
import importlib.metadata as m
assert transformers.__version__ == '4.40.2' and tensorboard.__version__ == '2.21.0'
assert m.version('megatron-core') == '0.6.0' and m.version('peft') == '0.11.1'
import jinja2, accelerate" 2>/dev/null; then
  echo "oracle-venv: $venv ready (transformers 4.40.2, tensorboard 2.21.0, megatron-core 0.6.0, peft 0.11.1)"
  exit 0
fi
echo "oracle-venv: creating $venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$megatron" "${peft[@]}"
"$venv/bin/python" -c "import transformers, tokenizers, torch, tensorboard; print('oracle-venv: transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__, 'tensorboard', tensorboard.__version__)"
