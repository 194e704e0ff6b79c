"""Helpers for the crash tests: a provider process that counts effects, an agent process
to kill, and what an operator reads and decides in between."""

from .agents import AgentExit, AgentSetup, run_agent
from .ledger_view import (
    LedgerView,
    assert_intents_preceded_effects,
    read_ledger,
    resolve_from_provider,
)
from .operator_commands import oncelog_cli
from .provider_process import EffectRecord, Provider, RequestRecord, running_provider

__all__ = [
    "AgentExit",
    "AgentSetup",
    "EffectRecord",
    "LedgerView",
    "Provider",
    "RequestRecord",
    "assert_intents_preceded_effects",
    "oncelog_cli",
    "read_ledger",
    "resolve_from_provider",
    "run_agent",
    "running_provider",
]
