"""Other projects' simulators, run beside ours on the same inputs (their code is never copied in: it is run from
``../shared/peers``, copied to a temporary folder, in a virtual environment of its own)."""
