"""SGLang adapter: push each new wsync version into an SGLang engine with its own
``update_weights_from_tensor`` (``Engine.update_weights_from_tensor(named_tensors, load_format,
flush_cache)`` in SGLang 0.5.x).

The process that drives the engine is a wsync rollout whose slots hold the Hugging Face tensors
(``Rollout.register_slots``, whole tensors or this TP rank's boxes); SGLang's loaders then place
them. Usage::

    rollout = wsync.Rollout(bootstrap, replica=k)
    rollout.register_slots(hf_shapes, device="cuda:0")
    rollout.commit()
    version = apply_newest(engine, rollout)      # at a safe point between batches
"""
from __future__ import annotations

from typing import Any, Optional

from ..rollout import Rollout
from ..types import VERSION_NEWEST


def apply_version(engine: Any, rollout: Rollout, version: int = VERSION_NEWEST,
                  flush_cache: bool = True) -> int:
    """Loads `version` (default the newest ready) into `engine` through
    ``engine.update_weights_from_tensor`` under one wsync lease; returns the version loaded."""
    with rollout.lease(version) as lease:
        named = list(rollout.lease_tensors(lease).items())
        engine.update_weights_from_tensor(named, flush_cache=flush_cache)
        rollout.version = lease.version
        return lease.version


def apply_newest(engine: Any, rollout: Rollout) -> Optional[int]:
    """apply_version when a version newer than the loaded one is ready; the version in use."""
    newest = rollout.newest_version()
    if newest is None or newest == rollout.version:
        return rollout.version
    return apply_version(engine, rollout, newest)
