"""`--backend local|k8s` and `--baselines DIR` of `statebed chaos run` and `chaos matrix`: where
experiments run, and where their fault-free baselines are kept for the next run with the same key."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

from statebed_base.errors import UsageError
from statebed_chaos.baseline_cache import Baselines
from statebed_chaos.k8s_backend import BACKENDS, K8sSettings

__all__ = ["add_backend_arg", "baselines_cache", "k8s_settings"]


def add_backend_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: everything on this machine; k8s: inside the chart's chaos controller pod, executors as pods (default: local)",
    )
    p.add_argument(
        "--baselines",
        metavar="DIR",
        type=Path,
        default=None,
        help="keep each fault-free baseline (local storage) in DIR and reuse it when an experiment has the same baseline key "
        "(workload, format, sizes, cluster, Spark conf, seed); one DIR per statebed version (default: none kept)",
    )


def k8s_settings(args: argparse.Namespace) -> K8sSettings | None:
    """The Kubernetes backend's settings (from the controller pod's environment) when --backend k8s."""
    return K8sSettings.from_env() if args.backend == "k8s" else None


def baselines_cache(args: argparse.Namespace) -> Baselines:
    """The run's baselines cache: in memory, and in --baselines DIR (created; a non-directory refused)."""
    path: Path | None = args.baselines
    if path is None:
        return Baselines()
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise UsageError(f"--baselines {path}: exists and is not a directory")
    except FileNotFoundError:
        path.mkdir(parents=True)
    except OSError as e:
        raise UsageError(f"--baselines {path}: {e.strerror}") from None
    return Baselines(path)
