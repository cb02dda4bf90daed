"""The processes of a run (driver, executors, Python workers, S3 server, proxy) as fault targets."""

from statebed_base.processes import IdentityMismatch

from .base import KINDS, Target, Targets
from .local import LocalTargets

__all__ = ["KINDS", "IdentityMismatch", "LocalTargets", "Target", "Targets"]
