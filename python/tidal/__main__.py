"""python3 -m tidal <command> ...: the tidal command (train, sample, tokenize, export, plan, ...) in
this Python process, with the same arguments, output and exit codes."""
import sys

from . import main

sys.exit(main())
