#!/usr/bin/env bash
# The Hugging Face oracle: a virtual environment over Debian's python3 that sees Debian's torch
# (--system-site-packages) and adds the pinned transformers and tokenizers from PyPI. The tests
# labelled oracle that compare against Hugging Face's own classes run its python. Safe to re-run.
# The environment lives in $TIDAL_ORACLE_VENV (default ~/.cache/tidal/oracle-venv).
set -euo pipefail
venv="${TIDAL_ORACLE_VENV:-$HOME/.cache/tidal/oracle-venv}"
pins=(transformers==4.40.2 "tokenizers>=0.19,<0.20" "safetensors>=0.4.3" "huggingface-hub<1.0" "numpy<2")
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import transformers, tokenizers, torch
assert transformers.__version__ == '4.40.2'" 2>/dev/null; then
  echo "oracle-venv: $venv ready (transformers 4.40.2)"
  exit 0
fi
echo "oracle-venv: creating $venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
"$venv/bin/python" -c "import transformers, tokenizers, torch; print('oracle-venv: transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__)"
