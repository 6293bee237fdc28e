"""Shared plumbing for every edgesmith package, one module per concern:

- ``errors``: ``EdgesmithError`` (one line naming the problem, one naming the fix) and its kin;
- ``checks``: shared validators (seeds, integers and floats in a range, finite arrays);
- ``config``: the ``Config`` mixin every pass, kind and model config builds on;
- ``files``: atomic writes, ``--force`` rules, scratch folders, path and special-file checks;
- ``cache``: the user cache, shipped weights, build locks, cache-or-build;
- ``registry``: ``Registry``, the one class behind every registry;
- ``feeds``: ``Feeds``, arrays by input name whose samples may lie on another axis than 0 (a recurrent state);
- ``procs``: child processes that die with their parent;
- ``lava_env``: the Lava environment, run out of process.

It sits at the root of the ``edgesmith`` namespace, outside the five packages of the data flow
(models -> compress -> hardware -> runtimes -> bench), so every one of them may import it without the
flow turning back. It imports nothing heavy: a latency worker that only times onnxruntime loads it.
Everything public is re-exported here, so ``from edgesmith.common import atomic_path`` keeps working.
"""
from edgesmith.common.errors import EdgesmithError, Interrupted, NoEvaluationData, raised
from edgesmith.common.checks import MAX_SEED, check_seed, seed_everything, check_finite_array
from edgesmith.common.config import Config
from edgesmith.common.files import (OUTPUT_MARKER, WRITE_ERRNOS, NAME_MAX, written_by_edgesmith, sweep_stale_temps,
                                    SCRATCH, sweep_stale_scratch, scratch_dir, check_output, check_output_path,
                                    regular_file, environment_error, quiet_native_output, atomic_path, atomic_files,
                                    write_json)
from edgesmith.common.cache import (SOURCE_ROOT, SHIPPED_WEIGHTS, cache_dir, cache_error, build_lock, cached,
                                    torch_cached, module_cached, load_or_train)
from edgesmith.common.registry import import_modules
from edgesmith.common.feeds import Feeds, batch_axes, n_samples, sample_slice
from edgesmith.common.procs import die_with_parent, run_child
from edgesmith.common.lava_env import (LAVA_ENV_VAR, LAVA_REQUIREMENTS, LAVA_STAMP, default_lava_env, lava_python,
                                       lava_available, run_in_lava_env)

__all__ = ['EdgesmithError', 'Interrupted', 'NoEvaluationData', 'raised', 'MAX_SEED', 'check_seed', 'seed_everything',
           'check_finite_array', 'Config', 'OUTPUT_MARKER', 'WRITE_ERRNOS', 'NAME_MAX', 'written_by_edgesmith',
           'sweep_stale_temps', 'SCRATCH', 'sweep_stale_scratch', 'scratch_dir', 'check_output', 'check_output_path',
           'regular_file', 'environment_error', 'quiet_native_output', 'atomic_path', 'atomic_files', 'write_json',
           'SOURCE_ROOT', 'SHIPPED_WEIGHTS', 'cache_dir', 'cache_error', 'build_lock', 'cached', 'torch_cached',
           'module_cached', 'load_or_train', 'import_modules', 'Feeds', 'batch_axes', 'n_samples', 'sample_slice',
           'die_with_parent', 'run_child', 'LAVA_ENV_VAR',
           'LAVA_REQUIREMENTS', 'LAVA_STAMP', 'default_lava_env', 'lava_python', 'lava_available', 'run_in_lava_env']
