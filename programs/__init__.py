"""The process programs' command lines: options built from dataclasses, and the entry points of the target
(`python -m programs.target`), the drafter (`python -m programs.drafter`) and the key tool."""
