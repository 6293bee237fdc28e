"""Round three of the bad-input corpus (issue 49): special files, model files that carry code, output paths the
file system refuses, cache faults, short and damaged audio, and arguments the Python API used to pass through
raw. Each case is a command, the exit code and message it must give, and what must be on disk afterwards."""
from __future__ import annotations

import errno
import json
import os
import pickle
import resource
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from edgesmith.bench.cli import main
from tests.reliability.test_bad_inputs import Case, _mlp_onnx, _nothing

ES = [sys.executable, "-m", "edgesmith.bench.cli"]


def _quantize_to(tmp: Path, out: Path, *extra) -> list:
    m = _mlp_onnx(tmp)
    np.save(tmp / "c.npy", np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32))
    return ["quantize", m, "--calibration-data", tmp / "c.npy", "--out", out, "--quiet", *extra]


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "f.onnx")
    return tmp / "f.onnx"


def _still_fifo(tmp: Path) -> None:
    assert stat.S_ISFIFO(os.lstat(tmp / "f.onnx").st_mode), "the FIFO was replaced"


def _link(tmp: Path) -> Path:
    (tmp / "mine.onnx").write_text("mine")
    (tmp / "l.onnx").symlink_to(tmp / "mine.onnx")
    return tmp / "l.onnx"


def _link_kept(tmp: Path) -> None:
    assert (tmp / "l.onnx").is_symlink() and (tmp / "mine.onnx").read_text() == "mine"


class _Marker:
    """A pickle that creates a file when unpickled: proof that a loader ran code from a model file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _pt2_with_pickled_weight(tmp: Path) -> list:
    ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(2, 4),))
    torch.export.save(ep, tmp / "ok.pt2")
    with zipfile.ZipFile(tmp / "ok.pt2") as z, zipfile.ZipFile(tmp / "evil.pt2", "w") as out:
        for n in z.namelist():
            data = z.read(n)
            if n.endswith("model_weights_config.json"):
                cfg = json.loads(data)
                cfg["config"]["weight"]["use_pickle"] = True
                data = json.dumps(cfg).encode()
            if n.endswith("weights/weight_0"):
                data = pickle.dumps(_Marker(tmp / "PWNED"))
            out.writestr(n, data)
    return ["deploy", tmp / "evil.pt2", "--target", "host-cpu", "--input-shape", "4", "--out", tmp / "r"]


def _no_code_ran(tmp: Path) -> None:
    assert not (tmp / "PWNED").exists(), "the model file's pickle ran"
    assert not (tmp / "r").exists()


def _pickled_module(tmp: Path) -> list:
    torch.save(torch.nn.Linear(4, 2), tmp / "whole.pt")
    return ["deploy", tmp / "whole.pt", "--target", "host-cpu", "--input-shape", "4", "--out", tmp / "r"]


def _pth_with_objects(tmp: Path) -> list:
    import argparse

    torch.save({"emb.weight": torch.zeros(3), "args": argparse.Namespace(n=1)}, tmp / "m.pth")
    return ["deploy", tmp / "m.pth", "--target", "host-cpu", "--out", tmp / "r"]


def _wav(tmp: Path, name: str, samples: int, rate: int = 16000) -> Path:
    from scipy.io import wavfile

    x = (np.random.default_rng(0).normal(size=samples) * 3000).astype(np.int16)
    wavfile.write(tmp / name, rate, x)
    return tmp / name


def _truncated_wav(tmp: Path) -> Path:
    full = _wav(tmp, "full.wav", 1600)
    (tmp / "t.wav").write_bytes(full.read_bytes()[:30])
    return tmp / "t.wav"


def _external_outside(tmp: Path) -> list:
    import onnx

    (tmp / "m").mkdir()
    src = _mlp_onnx(tmp / "m")
    model = onnx.load(str(src))
    onnx.save_model(model, str(src), save_as_external_data=True, location="w.bin", size_threshold=0)
    model = onnx.load(str(src), load_external_data=False)
    (tmp / "secret.bin").write_bytes(b"\0" * 128)
    for t in model.graph.initializer:
        for kv in t.external_data:
            if kv.key == "location":
                kv.value = "../secret.bin"
    onnx.save(model, str(src))
    np.save(tmp / "c.npy", np.zeros((4, 8), np.float32))
    return ["quantize", src, "--calibration-data", tmp / "c.npy", "--out", tmp / "q.onnx"]


def _factory(tmp: Path, body: str) -> list:
    (tmp / "f.py").write_text("import sys\nimport torch\n\n\ndef make():\n" + body)
    return ["deploy", tmp / "f.py:make", "--target", "host-cpu", "--input-shape", "4", "--out", tmp / "r"]


def _demo_recipe(tmp: Path, second: str) -> list:
    (tmp / "d.toml").write_text('[[deploy]]\nmodel = "digits-mlp"\ntarget = "jetson-orin-nano"\n'
                                f'[[deploy]]\nmodel = "{second}"\ntarget = "host-cpu"\n')
    return ["demo", "--recipe", tmp / "d.toml", "--out", tmp / "r", "--quiet"]


def _sweep_recipe(tmp: Path, text: str) -> list:
    (tmp / "s.toml").write_text('target = "host-cpu"\n' + text)
    return ["sweep", tmp / "s.toml", "--out", tmp / "r", "--quiet"]


CASES = [
    # --- 1. --force replaces only a regular file or a folder edgesmith wrote --------------------------------
    Case("quantize --force over a FIFO", lambda t: _quantize_to(t, _fifo(t), "--force"), "is a FIFO",
         check=_still_fifo),
    Case("export --force over a symbolic link", lambda t: ["export", "digits-mlp", "--out", _link(t), "--force"],
         "is a symbolic link", check=_link_kept),
    Case("bench --out over a FIFO is refused before measuring",
         lambda t: ["bench", _mlp_onnx(t), "--out", _fifo(t), "--force", "--reps", "5"], "is a FIFO",
         check=_still_fifo),
    # a FIFO as an input would block its reader forever: every reader refuses what is not a regular file
    Case("a FIFO as calibration data", lambda t: (os.mkfifo(t / "c.npy"), ["quantize", _mlp_onnx(t),
                                                                          "--calibration-data", t / "c.npy", "--out",
                                                                          t / "q.onnx"])[1],
         "c.npy is a FIFO, not a regular file", check=_nothing("q.onnx")),
    Case("a FIFO as the model", lambda t: (os.mkfifo(t / "m.pth"), ["deploy", t / "m.pth", "--target", "host-cpu",
                                                                    "--out", t / "r"])[1],
         "model file", check=_nothing("r")),
    Case("a FIFO as the ONNX file to time", lambda t: (os.mkfifo(t / "m.onnx"), ["bench", t / "m.onnx"])[1],
         "is a FIFO"),
    Case("a FIFO as the WAV to denoise", lambda t: (os.mkfifo(t / "a.wav"), ["denoise", t / "a.wav", "--out",
                                                                            t / "o.wav"])[1],
         "is a FIFO", check=_nothing("o.wav")),
    Case("a FIFO as the recipe", lambda t: (os.mkfifo(t / "r.toml"), ["deploy", "--recipe", t / "r.toml"])[1],
         "is a FIFO"),
    # --- 2. model files are not unpickled unless trusted ------------------------------------------------------
    Case("a .pt2 whose weights are a pickle", _pt2_with_pickled_weight, "--trust-model-file", check=_no_code_ran),
    Case("a module pickled whole with torch.save as .pt", _pickled_module, "pickled model (torch.save)",
         check=_nothing("r")),
    Case("a .pth holding Python objects", _pth_with_objects, "holds Python objects besides tensors",
         check=_nothing("r")),
    # --- 4. output paths the file system refuses --------------------------------------------------------------
    Case("quantize into a folder that is a file",
         lambda t: ((t / "afile").write_text("x"), _quantize_to(t, t / "afile" / "q.onnx"))[1], "afile is a file",
         check=lambda t: (t / "afile").read_text() == "x" or pytest.fail("changed")),
    Case("deploy into a folder that is a file",
         lambda t: ((t / "afile").write_text("x"), ["deploy", "digits-mlp", "--target", "jetson-orin-nano", "--out",
                                                   t / "afile" / "r"])[1], "afile is a file"),
    Case("sweep into a folder that is a file",
         lambda t: ((t / "afile").write_text("x"), _sweep_recipe(t, 'model = "digits-mlp"\n')[:-3]
                    + ["--out", t / "afile" / "s", "--quiet"])[1], "afile is a file"),
    Case("an output name over 255 bytes", lambda t: _quantize_to(t, t / ("a" * 300 + ".onnx")), "at most 255",
         check=_nothing("q.onnx")),
    # --- 5. the cache ---------------------------------------------------------------------------------------
    Case("EDGESMITH_CACHE pointing at a file",
         lambda t: ((t / "c").write_text("x"), ["deploy", "digits-mlp", "--target", "host-cpu", "--out", t / "r"])[1],
         "$EDGESMITH_CACHE=", check=_nothing("r"), env={"EDGESMITH_CACHE": "{tmp}/c"}),
    # --- 6./7. audio ----------------------------------------------------------------------------------------
    Case("denoise a WAV of no samples", lambda t: ["denoise", _wav(t, "e.wav", 0), "--out", t / "o.wav"],
         "holds no samples", check=_nothing("o.wav")),
    Case("denoise a WAV with a truncated header", lambda t: ["denoise", _truncated_wav(t), "--out", t / "o.wav"],
         "not a readable WAV file", check=_nothing("o.wav")),
    Case("denoise a WAV whose header says 1 Hz", lambda t: ["denoise", _wav(t, "r.wav", 1000, rate=1), "--out",
                                                          t / "o.wav"],
         "outside 4,000-384,000 Hz", check=_nothing("o.wav")),
    # --- 8. seeds -------------------------------------------------------------------------------------------
    Case("a recipe seed wider than 64 bits",
         lambda t: ((t / "r.toml").write_text(f'model = "digits-mlp"\ntarget = "host-cpu"\nseed = {10**24}\n'),
                    ["deploy", "--recipe", t / "r.toml", "--out", t / "r"])[1], "2**63 - 1", check=_nothing("r")),
    # --- 9. ONNX external data outside the model's folder ----------------------------------------------------
    Case("external data pointing outside the model's folder", _external_outside, "outside the model's folder",
         check=_nothing("q.onnx")),
    # --- 11. messages that name the real problem --------------------------------------------------------------
    Case("calibration values near 1e30", lambda t: (np.save(t / "h.npy", np.full((16, 8), 1e30, np.float32)),
                                                    _quantize_to(t, t / "q.onnx")[:2] + ["--calibration-data",
                                                                                         t / "h.npy", "--out",
                                                                                         t / "q.onnx"])[1],
         "the calibration data reaches 1.0e+30", check=_nothing("q.onnx")),
    Case("a factory whose output is NaN", lambda t: _factory(t, "    m = torch.nn.Linear(4, 2)\n"
                                                                "    m.weight.data[0, 0] = float('nan')\n    return m\n"),
         "f.py:make returns NaN values", check=_nothing("r")),
    Case("--recipe naming a folder", lambda t: ((t / "rd").mkdir(), ["deploy", "--recipe", t / "rd", "--out",
                                                                     t / "r"])[1],
         "is a folder, not a TOML file", check=_nothing("r")),
    Case("deploy --recipe on a file of [[deploy]] tables", lambda t: _demo_recipe(t, "digits-mlp")[:1]
         and ["deploy", "--recipe", t / "d.toml", "--out", t / "r"], "edgesmith demo --recipe", check=_nothing("r")),
    Case("an unknown --model-option on a producer without options",
         lambda t: ["deploy", "digits-mlp", "--target", "host-cpu", "--model-option", "width=3", "--out", t / "r"],
         "takes no options", check=_nothing("r")),
    # --- 12. a user's factory calling sys.exit --------------------------------------------------------------
    Case("sys.exit(3) inside a factory", lambda t: _factory(t, "    sys.exit(3)\n"), "called sys.exit(3)",
         check=_nothing("r")),
    Case("sys.exit(3) at a factory file's import", lambda t: _factory(t, "    pass\nsys.exit(3)\n"),
         "called sys.exit(3)", check=_nothing("r")),
    # --- 13. everything checked before the first piece of work ----------------------------------------------
    Case("demo whose second deploy names an unknown model", lambda t: _demo_recipe(t, "no-such-model"),
         "[[deploy]] 2: unknown model", check=_nothing("r")),
    Case("sweep with a cell whose model file is missing",
         lambda t: _sweep_recipe(t, '[grid]\nmodel = ["digits-mlp", "missing.onnx"]\n'),
         "model file", check=_nothing("r")),
    Case("a 160,000-cell grid without --yes",
         lambda t: _sweep_recipe(t, 'model = "digits-mlp"\n[grid]\nseed = ' + json.dumps(list(range(400)))
                                 + '\nthreads = ' + json.dumps(list(range(1, 401))) + "\n"),
         "160,000 cells", check=_nothing("r")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_round_three_input_gives_one_line_and_leaves_nothing_behind(case, tmp_path, capsys, monkeypatch):
    for k, v in case.env.items():
        monkeypatch.setenv(k, v.format(tmp=tmp_path))
    argv = [str(a) for a in case.setup(tmp_path)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == case.exit, err
    assert "Traceback" not in err and err.startswith("edgesmith: error: ") and "fix:" in err, err
    assert len(err.strip().splitlines()) == 2, err  # the problem and the fix, nothing else
    assert case.needle in err, err
    case.check(tmp_path)


def test_a_device_node_is_never_replaced_by_force(tmp_path, capsys):
    # a character device like /dev/null, made in the test's own folder: a regression replaces only this node
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root; the FIFO cases cover the same check")
    assert main(["export", "digits-mlp", "--out", str(dev), "--force"]) == 2
    assert "is a device" in capsys.readouterr().err
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_a_file_size_limit_is_one_line(tmp_path):
    argv = [str(a) for a in _quantize_to(tmp_path, tmp_path / "q.onnx")]

    def limit():  # 1 KiB: the int8 model is larger
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    p = subprocess.run([*ES, *argv], capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "file-size limit (ulimit -f)" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "q.onnx").exists() and not list(tmp_path.glob(".*.tmp"))


def test_the_trusted_flag_loads_a_pickled_module(tmp_path, capsys):
    torch.save(torch.nn.Linear(4, 2), tmp_path / "whole.pt")
    assert main(["deploy", str(tmp_path / "whole.pt"), "--target", "jetson-orin-nano", "--input-shape", "4",
                 "--variant", "fp32", "--trust-model-file", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert (tmp_path / "r" / "report.json").exists()


def test_a_full_cache_is_one_error_naming_it_and_leaves_no_lock(tmp_path, monkeypatch):
    from edgesmith.common import cache as common
    from edgesmith.common import EdgesmithError, cached

    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path))

    def full(value, tmp):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))

    with pytest.raises(EdgesmithError, match=r"\$EDGESMITH_CACHE=.*the disk is full") as e:
        cached(tmp_path / "models" / "x.pt", lambda: {"a": torch.zeros(2)}, load=torch.load, save=full)
    assert "EDGESMITH_CACHE" in e.value.fix
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == []  # no entry, no .lock, no temp folder

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "models"))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)  # where atomic writes make their temporary folder
    with pytest.raises(EdgesmithError, match=r"\$EDGESMITH_CACHE=.*read-only"):
        common.torch_cached(tmp_path / "models" / "y.pt", lambda: {"a": torch.zeros(2)})


def test_a_cache_written_through_torch_save_reports_the_errno(tmp_path):
    # torch's own file writer turns ENOSPC into a RuntimeError without an errno; the cache writes through memory
    from edgesmith.common.cache import _save_torch

    _save_torch({"a": torch.arange(3)}, tmp_path / "t.pt")
    assert torch.equal(torch.load(tmp_path / "t.pt", weights_only=True)["a"], torch.arange(3))


def test_denoise_takes_a_clip_shorter_than_one_frame(tmp_path):
    from scipy.io import wavfile

    assert main(["denoise", str(_wav(tmp_path, "s.wav", 100)), "--out", str(tmp_path / "o.wav"), "--quiet"]) == 0
    rate, y = wavfile.read(tmp_path / "o.wav")
    assert (rate, len(y)) == (16000, 100)


def test_denoise_reads_an_upper_case_extension_in_a_folder(tmp_path):
    (tmp_path / "in").mkdir()
    _wav(tmp_path / "in", "B.WAV", 1600)
    assert main(["denoise", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert (tmp_path / "out" / "B.WAV").exists()


def test_long_audio_is_enhanced_in_bounded_cross_faded_segments():
    from edgesmith.bench.apps.denoise import _in_segments

    x = np.random.default_rng(0).normal(size=10_000)
    seen = []

    def piece(part):
        seen.append(len(part))
        return part.copy()

    assert np.allclose(_in_segments(piece, x, 3000, 200), x)  # the cross-fade weights sum to one
    assert max(seen) == 3000 and len(seen) == 4
    seen.clear()
    assert np.array_equal(_in_segments(piece, x[:2500], 3000, 200), x[:2500]) and seen == [2500]


def test_python_api_arguments_are_checked_with_cli_messages(tmp_path):
    import edgesmith
    from edgesmith.common import EdgesmithError

    with pytest.raises(EdgesmithError, match="model is None, not a name or a path"):
        edgesmith.deploy(None, "host-cpu")
    with pytest.raises(EdgesmithError, match="out is None, not a path"):
        edgesmith.quantize("digits-mlp", out=None)
    with pytest.raises(EdgesmithError, match="opset is '17', not a whole number"):
        edgesmith.export("digits-mlp", tmp_path / "m.onnx", opset="17")
    with pytest.raises(EdgesmithError, match="seed is -1"):
        edgesmith.export("digits-mlp", tmp_path / "m.onnx", seed=-1)
    with pytest.raises(EdgesmithError, match="calibration_data is a ndarray, not a path"):
        edgesmith.deploy("digits-mlp", "host-cpu", calibration_data=np.zeros(3), out=tmp_path / "a")
    with pytest.raises(EdgesmithError, match="calibration is a path"):
        edgesmith.quantize("digits-mlp", out=tmp_path / "q.onnx", calibration="c.npy")
    with pytest.raises(EdgesmithError, match="inp is None, not a path"):
        edgesmith.denoise(None, tmp_path / "o.wav")
    with pytest.raises(EdgesmithError, match="workers is '2'"):
        edgesmith.sweep(tmp_path / "s.toml", workers="2")
    out = edgesmith.deploy("digits-mlp", "jetson-orin-nano", variants="fp32", out=tmp_path / "r")
    assert {r["variant"] for r in json.loads((out / "report.json").read_text())["results"]} == {"fp32"}


def test_a_sweep_interrupted_says_which_cells_are_kept(tmp_path, monkeypatch, capsys):
    from edgesmith.bench import sweep as sw

    (tmp_path / "s.toml").write_text('model = "digits-mlp"\ntarget = "host-cpu"\n[grid]\nseed = [0, 1]\n')

    def interrupted(todo, out, workers, threads, _ray, force=False):
        yield todo[0], {"summary": {"model": "m", "target": "host-cpu", "reference": {
            "metric": "accuracy", "higher_is_better": True}, "rows": []}, "wall_s": 1.0, "host": "h", "pid": 1,
            "report_md": "# r\n", "report": {"model": "m"}}, None
        raise KeyboardInterrupt

    monkeypatch.setattr(sw, "_run_local", interrupted)
    assert main(["sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "the 1 finished cell(s) of 2 are kept" in err and "nothing was written" not in err
    assert len(list((tmp_path / "o" / "cells").glob("*/cell.json"))) == 1


def test_a_second_sweep_waits_for_a_cell_the_first_holds_then_skips_it(tmp_path, monkeypatch):
    import threading
    import time

    from edgesmith.bench import sweep as sw

    (tmp_path / "s.toml").write_text('model = "digits-mlp"\ntarget = "host-cpu"\n')
    _, (cell,) = sw.load_sweep(tmp_path / "s.toml")
    runs = []

    def slow_cell(spec, folder, threads):
        runs.append(folder)
        time.sleep(0.5)
        return {"summary": {}, "wall_s": 0.5, "host": "h", "pid": 1, "report_md": "", "report": {}}

    monkeypatch.setattr(sw, "run_cell", slow_cell)
    results = []
    threads = [threading.Thread(target=lambda: results.append(sw._local_cell(cell, str(tmp_path / "c"), 1, False)))
               for _ in range(2)]
    threads[0].start()
    time.sleep(0.1)
    threads[1].start()
    for t in threads:
        t.join()
    assert len(runs) == 1 and sorted(r["ran"] for r in results) == [False, True]


def test_scratch_folders_of_dead_processes_are_swept(tmp_path, monkeypatch):
    from edgesmith.common import scratch_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"edgesmith-bench.{dead.pid}.abc"
    live = tmp_path / f"edgesmith-bench.{os.getppid()}.abc"
    for d in (stale, live):
        d.mkdir()
    with scratch_dir("denoise") as work:
        assert work.parent == tmp_path and work.name.startswith(f"edgesmith-denoise.{os.getpid()}.")
    assert not stale.exists() and live.exists() and not work.exists()
