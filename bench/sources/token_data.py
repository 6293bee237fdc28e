"""Token-lm data from the user's text: calibration windows at seeded random starts, evaluation windows cut
one after another (each one token longer than the model's input, for next-token scoring)."""
from __future__ import annotations

from edgesmith.bench.sources.base import UserRequest
from edgesmith.common import EdgesmithError
from edgesmith.common.checks import is_int
from edgesmith.models.user_data import TensorData, read_text, token_windows

SEQ_LEN, EVAL_LEN, MAX_CALIB, MAX_EVAL = 128, 256, 64, 64


def text_data(request: UserRequest, tokenizer) -> tuple[TensorData | None, object]:
    """(calibration windows, evaluation windows) from --calibration-data / --eval-data text (None if absent)."""
    seq_len = _window(request, "seq_len", SEQ_LEN)
    eval_len = _window(request, "eval_len", EVAL_LEN)
    cal = ev = None
    if request.calibration_data:
        tokens = tokenizer.encode(read_text(request.calibration_data))
        cal = TensorData({"tokens": token_windows(tokens, seq_len, MAX_CALIB, seed=request.seed + 1,
                                                  source=f"--calibration-data {request.calibration_data}",
                                                  option="seq_len")})
    if request.eval_data:
        tokens = tokenizer.encode(read_text(request.eval_data))
        ev = token_windows(tokens, eval_len + 1, MAX_EVAL, source=f"--eval-data {request.eval_data}",
                           option="eval_len")
    return cal, ev


def _window(request: UserRequest, key: str, default: int) -> int:
    value = request.take(key, default)
    if not is_int(value, 1):
        raise EdgesmithError(f"--model-option {key}={value!r} is not a window length.",
                             f"give a whole number of tokens, 1 or more (default {key}={default}).")
    return value
