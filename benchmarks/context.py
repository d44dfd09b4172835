"""What every section receives."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.savers import SaverSpec
from benchmarks.settings import Profile, Settings


@dataclass(frozen=True, slots=True)
class Context:
    """The run's settings, sample counts and selected savers (in report order)."""

    settings: Settings
    profile: Profile
    specs: tuple[SaverSpec, ...]
