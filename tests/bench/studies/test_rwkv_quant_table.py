"""The RWKVQuant claim table script (bench/studies/rwkv_quant_table.py) on the sweep: the percentile is
chosen on validation text only, and the per-window NLLs in each deploy report give its perplexity."""
from __future__ import annotations

import numpy as np
import pytest


def test_quant_table_through_the_sweep_picks_the_percentile_by_validation_only(tmp_path):
    from edgesmith.bench.studies.rwkv_quant_table import QUICK_RECIPE, TUNED, markdown, run_table
    from edgesmith.bench.sweep import cell_report

    (res,), run = run_table(QUICK_RECIPE, tmp_path / "sweep", workers=2, log=lambda msg: None)
    assert run["ran"] == 3 and run["failed"] == 0
    rows = {r["method"]: r for r in res["rows"]}
    assert set(rows) == {"fp32", "gptq", "rwkvquant", TUNED}
    tuned = rows[TUNED]
    cands = {c["percentile"]: c["val_ppl"] for c in tuned["validation"]}
    assert set(cands) == {90.0, 100.0} and tuned["percentile"] == min(cands, key=cands.get)
    assert tuned["val_ppl"] == min(cands.values())
    # validation text is not evaluation text: the fp32 model scores differently on the two
    assert rows["fp32"]["val_ppl"] != pytest.approx(rows["fp32"]["ppl"], rel=1e-3)
    assert res["val_tokens"] == res["eval_tokens"] == 2 * 256
    assert rows["gptq"]["vectors"] == tuned["vectors"] == "fp" and rows["rwkvquant"]["n_sq"] >= 1
    assert f"| {TUNED} | fp | 3 |" in markdown([res])
    # the paired comparison is against GPTQ at the same bits; its SE comes from the two windows
    assert "vs_gptq" in tuned and "vs_gptq" not in rows["gptq"] and tuned["vs_gptq"]["se"] > 0
    report = cell_report(tmp_path / "sweep", next(iter((tmp_path / "sweep" / "cells").iterdir())).name)
    for r in report["results"]:
        extra = r["evaluation"]["extra"]
        assert len(extra["window_nll"]) == 2
        assert float(np.exp(np.mean(extra["window_nll"]))) == pytest.approx(r["evaluation"]["value"], rel=1e-6)


def _report(model, method, pct, val_ppl, ppl, fp=(5.0, 6.0)):
    """A deploy report cut to what the table reads: fp32 and one quantized variant, two windows each."""
    def result(name, ppl, val):
        nll = [float(np.log(ppl))] * 2
        return {"variant": name, "runtime": "onnxruntime",
                "evaluation": {"value": ppl, "n_samples": 512, "extra": {
                    "data": "x", "window_nll": nll, "validation_perplexity": val, "validation_tokens": 512,
                    "validation_window_nll": [float(np.log(val))] * 2}}}
    quant = {"config": {"kind": method, "bits": 3, "quantize_vectors": True, "sq_percentile": pct},
             "bits_per_weight": 3.3, "extra": {"n_vq": 1, "n_sq": 11, "vector_bits_per_weight": 3.0,
                                               "decision": {"percentile": pct}},
             "size_after_bytes": 100, "seconds": 1.0, "layers": []}
    return {"model": model, "results": [result("fp32", *fp), result("q", ppl, val_ppl)],
            "variants": [{"name": "fp32", "pass_reports": [{"size_before_bytes": 400}]},
                         {"name": "q", "pass_reports": [quant]}]}


def test_tuned_row_ignores_evaluation_scores_of_the_candidates():
    from edgesmith.bench.studies.rwkv_quant_table import TUNED, table_from_reports

    # the best validation candidate (75) is the worst on evaluation text: it must still be the one chosen
    reports = [_report("m", "rwkvquant", 75.0, 6.0, 9.0), _report("m", "rwkvquant", 90.0, 6.5, 5.5),
               _report("m", "rwkvquant", 100.0, 6.5, 5.1), _report("m", "rwkv-gptq", 90.0, 7.0, 7.0)]
    (res,) = table_from_reports(reports)
    rows = {r["method"]: r for r in res["rows"]}
    assert rows[TUNED]["percentile"] == 75.0 and rows[TUNED]["ppl"] == 9.0
    assert rows["rwkvquant"]["percentile"] == 90.0  # the paper's default row stays
    assert rows[TUNED]["vs_gptq"]["dnll"] == pytest.approx(np.log(9.0) - np.log(7.0))


def test_quant_table_refuses_cells_whose_fp32_scores_disagree():
    from edgesmith.bench.studies.rwkv_quant_table import table_from_reports
    from edgesmith.common import EdgesmithError

    with pytest.raises(EdgesmithError, match="fp32 perplexity differs"):
        table_from_reports([_report("m", "rwkv-gptq", 90.0, 7.0, 7.0),
                            _report("m", "rwkv-rtn", 90.0, 7.0, 7.0, fp=(5.1, 6.0))])


def test_quant_table_takes_one_recipe_and_names_normalised_vq_in_its_rows(capsys):
    from edgesmith.bench.studies.rwkv_quant_table import main, markdown, table_from_reports, vq_note

    with pytest.raises(SystemExit) as e:
        main(["--quick", "--recipe", "other.toml"])
    assert e.value.code == 2 and "not both" in capsys.readouterr().err
    # a VQ cell quantized with blockwise normalisation says so; an SQ-only cell with the same option does not
    vq, sq = _report("m", "rwkv-gptvq", 90.0, 7.0, 7.0), _report("m", "rwkv-gptq", 90.0, 7.0, 7.0)
    vq["variants"][1]["pass_reports"][0]["config"]["vq_scale_block"] = 32
    sq["variants"][1]["pass_reports"][0]["config"]["vq_scale_block"] = 32
    sq["variants"][1]["pass_reports"][0]["extra"]["n_vq"] = 0
    md = markdown(table_from_reports([vq, sq]))
    assert "| gptvq (VQ normalised per 32) |" in md and "| gptq | quantized |" in md
    # the seeds table's rows carry one VQ-layer count per seed: a note where any seed has a VQ layer
    assert vq_note({"vq_scale_block": 32, "n_vq": [0, 0]}) == "" and vq_note({"vq_scale_block": 32, "n_vq": [0, 2]})
