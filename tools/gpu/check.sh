#!/bin/bash
# The GPU checks of docs/gpu.md, for a lent GPU machine that has CUDA torch but no internet.
# Bundle first, here (see docs/gpu.md): wheels of what that machine lacks in .gpu/whl, a copy of the
# shared data the tests read in .gpu/data; then run `bash tools/gpu/check.sh` there, carrying .gpu.
# Writes smoke.jsonl and pytest.log to $OUT (default: ./gpu-out).
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -2
if [ -d .gpu/data ] && [ ! -d ../shared/data ]; then mkdir -p ../shared && cp -r .gpu/data ../shared/data; fi
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())" || exit 4
timeout "${SMOKE_S:-150}" python3 tools/gpu/smoke.py "$OUT" 2>"$OUT/smoke.err" | tee "$OUT/smoke.jsonl"
echo "smoke rc=$?"
# the default suite's files that train, load and serve on whatever device auto picks
timeout "${TESTS_S:-330}" python3 -m pytest -p no:cacheprovider -q -n "${WORKERS:-8}" --timeout 240 -rfE \
  ${TESTS:-tests/test_step10.py tests/test_infer.py tests/test_eval.py tests/test_serve.py tests/test_onnx_batch.py
  tests/test_parity.py tests/test_contract.py tests/test_resume.py tests/test_optimize.py tests/test_sft.py
  tests/test_peft.py tests/test_pair.py tests/test_ner.py tests/test_seq2seq.py tests/test_distributed.py} > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -40
