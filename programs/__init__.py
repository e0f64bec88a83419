"""The process programs' command lines: options built from dataclasses, and the entry points of the target
(`python -m programs.target_program`), the drafter (`python -m programs.drafter_program`) and the key tool."""
