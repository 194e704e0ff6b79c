"""The support agent of ``oncelog demo``, run from a checkout; README.md beside this file
says how, and where to read its code.

    python examples/support_agent/agent.py plain|oncelog --services DIR/services.json
        [--ledger DIR/ledger.db]

The agent lives in the package, ``src/oncelog/showcases/demo/support_agent.py``, so that
``oncelog demo`` works after a plain (non-editable) ``pip install``; this entry adds
nothing to it, so there is one copy to read and to keep right.
"""

from oncelog.showcases.demo.support_agent import main

if __name__ == "__main__":
    main()
