"""The shapes-only architectures benchmark: a public architecture written as a factory, deployed from its shapes,
tabulated; a model the toolkit refuses is a row with its reason."""
from __future__ import annotations

from edgesmith.bench.studies import shapes_architectures as sa


def test_one_architecture_runs_from_its_factory_text_and_shapes_into_a_table_row(tmp_path):
    (tmp_path / "factories").mkdir()
    row = sa.run_one("distilbert", tmp_path, reps=5, threads=1)
    assert "error" not in row, row
    assert row["export_error_vs_torch"] < 1e-4 and row["int4_bytes"] < 0.6 * row["fp32_bytes"]
    done, total = map(int, row["int4_layers"].split("/"))
    assert 0 < done < total  # attention's two run-time MatMuls per layer stay fp32
    assert row["int4_sqnr_db"] > 10 and row["latency_provenance"] == "measured"
    assert row["energy_provenance"].startswith("estimated")
    md = sa.markdown({"rows": [row, {"model": "x", "error": "no good"}], "threads": 1, "reps": 5})
    assert "| distilbert | input_ids 16:int64, attention_mask 16:int64 |" in md and "| x | refused: no good |" in md


def test_every_factory_text_is_python_that_names_make():
    for name, (expr, given) in sa.ARCHITECTURES.items():
        compile(sa.factory_text(expr), name, "exec")
        assert all(v.replace(",", "").replace(":int64", "").isdigit() for v in given.values())


def test_with_calibration_data_the_row_has_int8_and_names_what_int8_kept_in_fp32(tmp_path):
    # T5: its relative-position buckets are float arithmetic cast to int64; onnxruntime's full int8 set would quantize
    # them (its bias Gather then read index -9.2e18), so int8 keeps them fp32 and says so; the default weight-layer set
    # never touches them
    (tmp_path / "factories").mkdir()
    full = sa.run_one("t5-encoder", tmp_path, reps=5, threads=1, calibrate=True, options={"int8_op_types": []})
    default = sa.run_one("t5-encoder", tmp_path, reps=5, threads=1, calibrate=True)
    for row in (full, default):
        assert "error" not in row, row
        assert row["int8_sqnr_db"] > 20 and row["int8_bytes"] < row["fp32_bytes"]
    assert any("integer indices" in k for k in full["int8_kept_fp32"]) and default["int8_kept_fp32"] == []
    md = sa.markdown({"rows": [full], "threads": 1, "reps": 5, "calibrate": True, "options": {"int8_op_types": []}})
    assert "| t5-encoder |" in md and "5 index" in md and "Deploy options: int8_op_types=[]." in md
