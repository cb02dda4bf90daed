"""Item 6: `statebed run --cluster standalone` used to set executor memory and cores in the session
builder, which beats spark-defaults.conf: the chart's executor sizing (spark-defaults, SPARK_CONF_DIR)
was ignored on Kubernetes. Now a setting spark-submit was given wins; statebed's own sizing stays
for the standalone cluster it starts. The last test runs a real spark-submit (a JVM, local[1])."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
import yaml
from k8s_render import RELEASE, VALUES, one, render

from statebed_job.config import JobOptions
from statebed_job.session import STANDALONE_SIZING, spark_conf
from statebed_model.rundir import RunDir

SIZING = tuple(STANDALONE_SIZING)


def test_statebeds_sizing_yields_to_what_spark_submit_was_given(tmp_path: Path) -> None:
    opts, run = JobOptions(cluster="standalone"), RunDir(tmp_path)
    assert {k: spark_conf(opts, run, "spark://x:7077")[k] for k in SIZING} == STANDALONE_SIZING  # the control
    given = spark_conf(opts, run, "k8s://https://kubernetes.default.svc", submitted=SIZING)
    assert not set(SIZING) & set(given)
    flag = spark_conf(JobOptions(cluster="standalone", extra_conf={"spark.executor.memory": "700m"}), run, "spark://x:7077")
    assert flag["spark.executor.memory"] == "700m"  # `statebed run --conf` wins too


@pytest.mark.parametrize("platform", list(VALUES))
def test_the_chart_sizes_executors_in_spark_defaults_and_the_driver_job_sets_no_sizing(platform: str) -> None:
    docs = render(platform)
    conf = one(docs, "ConfigMap", f"{RELEASE}-spark-conf")["data"]["spark-defaults.conf"]
    defaults = dict(line.split(None, 1) for line in conf.splitlines() if line.strip())
    values = yaml.safe_load((VALUES[platform] or Path(os.devnull)).read_text() or "{}") or {}
    want = {"default": "768m", "kind": "768m", "minikube": "640m", "kube-up": "768m"}[platform]
    assert defaults["spark.executor.memory"] == want == (values.get("spark", {}).get("executor", {}).get("memory") or "768m")
    script = one(docs, "Job", f"{RELEASE}-driver")["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert not any(k in script for k in SIZING)  # nothing on the command line overrides spark-defaults


_PROBE = """
import sys
from statebed_job.config import JobOptions
from statebed_job.session import build_session
from statebed_model.rundir import RunDir
spark = build_session(JobOptions(cluster="standalone"), RunDir(sys.argv[1]), "local[1]")
conf = spark.sparkContext.getConf()
print("SIZING", conf.get("spark.executor.memory"), conf.get("spark.executor.cores"))
spark.stop()
"""


@pytest.mark.parametrize("launch", ["spark-submit", "python"])
@pytest.mark.parametrize(("defaults", "want"), [("spark.executor.memory 640m\nspark.executor.cores=2\n", "640m 2"), ("", "1g 1")])
def test_a_driver_keeps_spark_defaults_sizing(tmp_path: Path, launch: str, defaults: str, want: str) -> None:
    """SPARK_CONF_DIR holding spark-defaults.conf, as in the chart's pods: under spark-submit (the driver
    Job) and started by statebed itself (the chaos controller's drivers). Without a sizing there,
    statebed's own applies (the control)."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(defaults)
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    env = {**os.environ, "SPARK_CONF_DIR": str(conf_dir), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    cmd = [submit, "--master", "local[1]", probe] if launch == "spark-submit" else [sys.executable, probe]
    out = subprocess.run([*cmd, tmp_path / "run"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"SIZING {want}" in out.stdout.splitlines(), out.stdout
