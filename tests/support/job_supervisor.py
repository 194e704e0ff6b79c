"""What the Kubernetes Job of ``examples/kubernetes/job.yaml`` does with an agent's exit
codes, without Kubernetes: its ``podFailurePolicy`` and ``backoffLimit`` read from the
manifest, applied to processes started here. A code under ``FailJob`` fails the Job at
once; one under ``Ignore`` starts a new pod, uncounted; any other non-zero code starts a
new pod, counted against ``backoffLimit``; 0 succeeds. ``deadline`` pods stand in for
``activeDeadlineSeconds``, which bounds the uncounted restarts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

JOB = Path(__file__).parent.parent.parent / "examples" / "kubernetes" / "job.yaml"


@dataclass(frozen=True)
class Job:
    fail_job: frozenset[int]
    ignore: frozenset[int]
    backoff_limit: int
    deadline: int = 20

    @classmethod
    def example(cls) -> Job:
        (manifest,) = yaml.safe_load_all(JOB.read_text())
        spec: dict[str, Any] = manifest["spec"]
        codes: dict[str, set[int]] = {"FailJob": set(), "Ignore": set()}
        for rule in spec["podFailurePolicy"]["rules"]:
            if "onExitCodes" in rule:
                assert rule["onExitCodes"]["operator"] == "In"
                codes[rule["action"]].update(rule["onExitCodes"]["values"])
        return cls(frozenset(codes["FailJob"]), frozenset(codes["Ignore"]), spec["backoffLimit"])

    def run(self, pod: Callable[[], int]) -> tuple[str, list[int]]:
        """Start pods as the Job would until it ends: ``("succeeded" | "failed" |
        "deadline", the exit code of each pod)``."""
        codes: list[int] = []
        failures = 0
        while len(codes) < self.deadline:
            code = pod()
            codes.append(code)
            if code == 0:
                return "succeeded", codes
            if code in self.fail_job:
                return "failed", codes
            if code not in self.ignore:
                failures += 1
                if failures > self.backoff_limit:
                    return "failed", codes
        return "deadline", codes
