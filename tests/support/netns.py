"""A network namespace joined to this host by a veth pair, to partition an agent from its
server: packet filter rules inside the namespace drop the traffic between the pair's two
addresses, and nothing outside the namespace is touched. Removing the namespace removes
its rules, its end of the pair, and so the other end too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

HOST_ADDRESS = "10.213.0.1"  # this host's end of the pair (the server listens here)
AGENT_ADDRESS = "10.213.0.2"  # the namespace's end
_TABLE = "oncelog_partition"


def missing() -> str | None:
    """Why no namespace can be partitioned here, or None if one can."""
    absent = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if absent:
        return f"{' and '.join(absent)} (iproute2, nftables), to partition a namespace"
    if os.geteuid() != 0:
        return "root, to make a network namespace"
    return None


def _run(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, input=stdin, timeout=30)


@dataclass(frozen=True)
class Namespace:
    name: str

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` to run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def partition(self, port: int) -> None:
        """Drop every packet between the pair's addresses on the server's ``port``, both
        ways, silently: no reset, no ICMP, as a cable pulled or a firewall dropping."""
        rules = f"""
        table inet {_TABLE} {{
            chain out {{
                type filter hook output priority 0; policy accept;
                ip saddr {AGENT_ADDRESS} ip daddr {HOST_ADDRESS} tcp dport {port} drop
            }}
            chain in {{
                type filter hook input priority 0; policy accept;
                ip saddr {HOST_ADDRESS} ip daddr {AGENT_ADDRESS} tcp sport {port} drop
            }}
        }}
        """
        _run(*self.command(["nft", "-f", "-"]), stdin=rules)

    def heal(self) -> None:
        _run(*self.command(["nft", "delete", "table", "inet", _TABLE]))

    def kill_everything(self) -> None:
        """SIGKILL what still runs inside (only this test's processes run there)."""
        listed = subprocess.run(
            ["ip", "netns", "pids", self.name], capture_output=True, text=True, check=False
        )
        for pid in listed.stdout.split():
            with suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


@contextmanager
def namespace() -> Iterator[Namespace]:
    """A namespace at AGENT_ADDRESS, reaching this host at HOST_ADDRESS; removed, with
    whatever runs in it, when the block ends."""
    tag = str(os.getpid())[-7:]
    made = Namespace(f"oncelog-{tag}")
    host_end, agent_end = f"olh{tag}", f"ola{tag}"
    inside = ["ip", "netns", "exec", made.name, "ip"]
    try:
        _run("ip", "netns", "add", made.name)
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", agent_end)
        _run("ip", "link", "set", agent_end, "netns", made.name)
        _run("ip", "addr", "add", f"{HOST_ADDRESS}/30", "dev", host_end)
        _run("ip", "link", "set", host_end, "up")
        _run(*inside, "addr", "add", f"{AGENT_ADDRESS}/30", "dev", agent_end)
        _run(*inside, "link", "set", agent_end, "up")
        _run(*inside, "link", "set", "lo", "up")
        yield made
    finally:
        made.kill_everything()
        subprocess.run(["ip", "netns", "del", made.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, check=False)
