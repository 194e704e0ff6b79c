"""``oncelog demo``: the incident the project exists to prevent, reproduced and fixed."""
