"""The Kubernetes manifests in ``examples/kubernetes/``, parsed (no cluster here), and
checked for what exactly-once depends on: the run id from the Job's name, exit codes the
Job treats as oncelog means them, a grace period that fits the longest step, a preStop
hook that starts the drain, and commands the ``oncelog`` CLI accepts. PyYAML (in the
``dev`` extra only) reads the manifests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

import oncelog
from oncelog.cli import cli

EXAMPLES = Path(__file__).parent.parent / "examples" / "kubernetes"
SIGTERM_TO_PID_1 = ["python", "-c", "import os, signal; os.kill(1, signal.SIGTERM)"]


def load(name: str) -> list[Any]:
    return list(yaml.safe_load_all((EXAMPLES / name).read_text()))


def agent_module() -> Any:
    spec = importlib.util.spec_from_file_location("k8s_agent", EXAMPLES / "agent.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_job_takes_its_run_id_from_the_job_name() -> None:
    (job,) = load("job.yaml")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    sources = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
               for e in container["env"] if "fieldRef" in e.get("valueFrom", {})}  # fmt: skip
    assert sources == {
        "JOB_NAME": "metadata.labels['batch.kubernetes.io/job-name']",
        "JOB_NAMESPACE": "metadata.namespace",
    }, "never metadata.name: the pod's name changes with every retry"
    assert container["command"] == ["python", "/app/agent.py"], "exec form: Python is PID 1"


def test_the_job_retries_75_and_leaves_3_and_4_to_a_person() -> None:
    (job,) = load("job.yaml")
    spec = job["spec"]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["activeDeadlineSeconds"] > 0, "exit 75 is not counted: something must bound it"
    by_action: dict[str, list[int]] = {}
    for rule in spec["podFailurePolicy"]["rules"]:
        if "onExitCodes" in rule:
            assert rule["onExitCodes"]["containerName"] == pod["containers"][0]["name"]
            assert rule["onExitCodes"]["operator"] == "In"
            by_action.setdefault(rule["action"], []).extend(rule["onExitCodes"]["values"])
    assert by_action == {
        "FailJob": [oncelog.EXIT_HALTED, oncelog.EXIT_WAITING],
        "Ignore": [oncelog.EXIT_TRY_LATER],
    }


def test_the_grace_period_fits_the_longest_step_and_the_hook_starts_the_drain() -> None:
    agent = agent_module()
    (job,) = load("job.yaml")
    pods = [job["spec"]["template"]["spec"]]
    pods += [deployment["spec"]["template"]["spec"] for deployment in load("consumers.yaml")]
    for pod in pods:
        (container,) = pod["containers"]
        assert pod["terminationGracePeriodSeconds"] >= agent.STEP_TIMEOUT + 15
        assert container["lifecycle"]["preStop"]["exec"]["command"] == SIGTERM_TO_PID_1
    assert agent.LEASE_TTL == 30.0  # docs/kubernetes.md works with these numbers
    assert agent.STEP_TIMEOUT == 60.0


def test_the_consumer_and_worker_commands_are_ones_the_cli_accepts() -> None:
    for deployment in load("consumers.yaml"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        program, *args = container["command"]
        assert program == "oncelog"
        command: Any = cli
        while args and args[0] in getattr(command, "commands", {}):
            command = command.commands[args.pop(0)]
        command.make_context(command.name, list(args))  # raises on an unknown option
        assert args[args.index("--lease-ttl") + 1] == "30"
