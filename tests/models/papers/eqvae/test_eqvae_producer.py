"""The eqvae producer: packed output, three fine-tune modes, reproducibility, metric through predict, deploy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edgesmith.models import get_producer
from edgesmith.common import EdgesmithError


def _predict(module):
    def predict(x):
        with torch.no_grad():
            return module(torch.from_numpy(x)).numpy()
    return predict


@pytest.fixture(scope="module")
def tiny():
    return get_producer("eqvae", tiny=True).build()


def test_input_shape_comes_from_the_config_without_training():
    p = get_producer("eqvae")
    assert p.input_shape == (1, 32, 32) and p.latent_shape == (4, 8, 8) and not hasattr(p, "module_")


def test_output_packs_reconstruction_and_latent(tiny):
    x = tiny.calibration_data(5)
    out = _predict(tiny.module)(x)
    assert out.shape == (5, 1024 + 256)
    recon, z = tiny.split_output(out, 5)
    vae = tiny.module.vae
    with torch.no_grad():
        zt = vae.encode(torch.from_numpy(x))[0]
        np.testing.assert_allclose(z, zt.numpy(), atol=1e-6)
        np.testing.assert_allclose(recon, vae.decode(zt).numpy(), atol=1e-6)
    with pytest.raises(EdgesmithError, match="expected"):
        tiny.split_output(out[:, :1024], 5)


def test_evaluation_reports_psnr_and_equivariance(tiny):
    ev = tiny.evaluate(_predict(tiny.module))
    assert ev.metric.name == "psnr" and ev.metric.higher_is_better and np.isfinite(ev.value)
    assert set(ev.extra["equivariance_mse"]) == {"rotation", "scale", "scale+rotation"}
    assert ev.extra["latent_rotation_error"] > 0
    assert ev.value == pytest.approx(10 * np.log10(1 / ev.extra["mse"]), abs=3.0)


def test_training_is_reproducible_and_modes_share_the_base(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "a"))
    p = get_producer("eqvae", tiny=True)
    base, eq, plain = (p.build_vae(m) for m in ("none", "eq", "plain"))
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "b"))
    again = get_producer("eqvae", tiny=True).build_vae("eq")
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in eq.state_dict().items())
    assert not all(torch.equal(v, plain.state_dict()[k]) for k, v in eq.state_dict().items())
    assert not all(torch.equal(v, base.state_dict()[k]) for k, v in eq.state_dict().items())
    assert len(list((tmp_path / "a" / "models").glob("eqvae-base-*.pt"))) == 1


def test_damaged_cache_entry_is_retrained(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))
    p = get_producer("eqvae", tiny=True)
    good = p.build_vae("none").state_dict()
    path = p._cache_path("base")
    path.write_bytes(b"not a checkpoint")
    again = get_producer("eqvae", tiny=True).build_vae("none").state_dict()
    assert all(torch.equal(good[k], again[k]) for k in good)


def test_bad_options_are_user_errors():
    with pytest.raises(EdgesmithError, match="finetune"):
        get_producer("eqvae", finetune="bogus")
    assert "int4" in get_producer("eqvae").unsupported_formats()


def test_tiny_deploy_matches_the_torch_metric(tmp_path, tiny):
    from edgesmith.bench.pipeline.deploy import DeployOptions, deploy
    from edgesmith.hardware import PlanOptions

    # int4 and TVM rows are exercised by the full deploy command; two variants keep this test short
    plan = PlanOptions(tvm=False, variants=("fp32", "int8"))
    out = deploy(DeployOptions("eqvae", "host-cpu", tmp_path / "r", plan=plan, model_options={"tiny": True},
                               warmup=2, reps=5, batch_sizes=(1,), progress=False))
    report = json.loads((out / "report.json").read_text())
    ref = report["reference"]["evaluation"]["value"]
    rows = {r["variant"]: r["evaluation"]["value"] for r in report["results"]}
    assert rows["fp32"] == pytest.approx(ref, abs=1e-3)
    assert np.isfinite(rows["int8"]) and abs(rows["int8"] - ref) < 2.0
    assert "int4" not in rows
