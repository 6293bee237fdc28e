"""The RWKVQuant claim table script (bench/benchmarks/rwkv_quant_table.py): the percentile is chosen on
validation text only, and its per-window NLLs give the producer's own perplexity."""
from __future__ import annotations

import numpy as np
import pytest


def test_quant_table_picks_rwkvquant_percentile_by_validation_perplexity_only(tmp_path):
    from edgesmith.bench.benchmarks.rwkv_quant_table import TUNED, markdown, run_model

    res = run_model("rwkv7-ref", (3,), 4, log=lambda msg: None, methods=("gptq", TUNED), eval_sequences=2,
                    vectors=(False,), percentiles=(90.0, 100.0))
    fp, gptq, tuned = res["rows"]
    cands = {c["percentile"]: c["val_ppl"] for c in tuned["validation"]}
    assert set(cands) == {90.0, 100.0} and tuned["decision"]["percentile"] == min(cands, key=cands.get)
    assert tuned["val_ppl"] == min(cands.values())
    # validation text is not evaluation text: the fp32 model scores differently on the two
    assert fp["val_ppl"] != pytest.approx(fp["ppl"], rel=1e-3) and res["val_tokens"] == res["eval_tokens"]
    assert gptq["vectors"] == tuned["vectors"] == "fp" and tuned["n_vq"] >= 1
    assert f"| {TUNED} | fp | 3 |" in markdown([res])
    # the paired comparison is against GPTQ at the same bits, and per-window NLLs give the producer's perplexity
    assert "vs_gptq" in tuned and "vs_gptq" not in gptq and tuned["vs_gptq"]["se"] > 0
    from edgesmith.bench.benchmarks.rwkv_quant_table import window_nll
    from edgesmith.models import get_producer

    prod = get_producer("rwkv7-ref").build()
    prod.eval_sequences = 2
    assert float(np.exp(window_nll(prod.module, prod.eval_windows()).mean())) == pytest.approx(fp["ppl"], rel=1e-6)
