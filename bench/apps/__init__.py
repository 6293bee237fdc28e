"""Apps: commands built on a deployed model of one family (``edgesmith denoise``: WAV in, WAV out).

Registration: one line per app module in ``APP_MODULES``; each module registers one ``App`` (its command name,
its arguments and the function that runs it), which ``edgesmith --help`` lists beside the toolkit's own commands.
The generic CLI names no app and no model family.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from edgesmith.common.registry import Registry

APP_MODULES = (
    "edgesmith.bench.apps.denoise",  # denoise: the S5 speech denoiser on WAV files
)


@dataclass(frozen=True)
class App:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


APPS: Registry[App] = Registry("command", "edgesmith.bench.apps:APP_MODULES")


def register_app(app: App) -> App:
    return APPS.register(app.name, app)
