"""`--backend local|k8s` of `statebed chaos run` and `chaos matrix`: where experiments run."""

from __future__ import annotations

import argparse

from statebed_chaos.k8s_backend import BACKENDS, K8sSettings

__all__ = ["add_backend_arg", "k8s_settings"]


def add_backend_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: everything on this machine; k8s: inside the chart's chaos controller pod, executors as pods (default: local)",
    )


def k8s_settings(args: argparse.Namespace) -> K8sSettings | None:
    """The Kubernetes backend's settings (from the controller pod's environment) when --backend k8s."""
    return K8sSettings.from_env() if args.backend == "k8s" else None
