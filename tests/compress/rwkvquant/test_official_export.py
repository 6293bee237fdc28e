"""A quantized RWKV model written back as an official-layout .pth (dequantized weights) that BlinkDL's rwkv package
loads and runs to the toolkit's logits."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from edgesmith.bench.cli import main
from edgesmith.compress.rwkvquant.qcheckpoint import dequantized_model, save_quantized
from edgesmith.compress.rwkvquant.rwkvquant import RTNConfig, quantize_rwkv
from edgesmith.models import get_producer
from edgesmith.models.rwkv.checkpoint import load_rwkv

TOKENS = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]

# the official package, in its own process: it reads its switches (RWKV-7, no JIT, no CUDA) from the environment
OFFICIAL = """
import json, sys
from rwkv.model import RWKV
m = RWKV(model=sys.argv[1], strategy="cpu fp32")
out, _ = m.forward(json.loads(sys.argv[2]), None)
print(json.dumps(out.float().tolist()))
"""


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    prod = get_producer("rwkv7-ref").build()
    qmodel, _ = quantize_rwkv(prod.module_, prod.calibration_data(8), RTNConfig(bits=4, n_calibration=8))
    path = tmp_path_factory.mktemp("q") / "model.quantized.pth"
    save_quantized(qmodel, path)
    return qmodel, path


@pytest.mark.slow
def test_the_official_rwkv_package_runs_the_exported_quantized_model_to_the_toolkits_logits(quantized, tmp_path):
    qmodel, qpath = quantized
    out = tmp_path / "official.pth"
    assert main(["export", str(qpath), "--out", str(out), "--dtype", "fp32"]) == 0
    with torch.no_grad():
        ours = qmodel(torch.tensor([TOKENS]))
        ours = (ours[0] if isinstance(ours, tuple) else ours)[0, -1].numpy()
    env = {**os.environ, "RWKV_V7_ON": "1", "RWKV_JIT_ON": "0", "RWKV_CUDA_ON": "0"}
    res = subprocess.run([sys.executable, "-c", OFFICIAL, str(out.with_suffix("")), json.dumps(TOKENS)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    theirs = np.array(json.loads(res.stdout.strip().splitlines()[-1]))
    assert np.abs(theirs - ours).max() < 1e-4  # the same dequantized weights, two implementations (fp32; 4e-6 seen)


def test_an_fp16_export_holds_the_dequantized_weights_rounded_once(quantized, tmp_path):
    qmodel, qpath = quantized
    out = tmp_path / "official16.pth"
    assert main(["export", str(qpath), "--out", str(out)]) == 0  # fp16 by default
    assert {v.dtype for v in torch.load(out, weights_only=True).values()} == {torch.float16}
    back = load_rwkv(out).state_dict()
    plain = dequantized_model(qmodel).state_dict()
    for k, v in plain.items():
        assert torch.equal(back[k], v.to(torch.float16).to(torch.float32)), k


def test_a_non_rwkv_model_or_a_bad_dtype_is_refused_without_writing(capsys, tmp_path):
    from cli_helpers import assert_user_error, run_cli

    code, _, err = run_cli(capsys, "export", "digits-mlp", "--out", tmp_path / "d.pth")
    assert_user_error(code, err, "only RWKV models export to an official .pth")
    code, _, err = run_cli(capsys, "export", "rwkv7-ref", "--out", tmp_path / "r.pth", "--dtype", "int4")
    assert_user_error(code, err, "dtype 'int4'")
    assert list(tmp_path.iterdir()) == []
