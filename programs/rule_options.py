"""The command line's words for the pure rules' settings: the group title of pipeline.config.PoolConfig and
pipeline.settings.DecodeConfig on a command line, and each field's help, metavar and parser (programs.cli
reads them with the fields; the dataclasses and their checks stay in pipeline/, which knows no command line)."""

from __future__ import annotations

from pipeline.config import PoolConfig
from pipeline.settings import DecodeConfig

# dataclass -> (the title of its group of options, field -> {"help", "metavar", "parse": a name in cli.PARSERS})
OPTIONS: dict[type, tuple[str, dict[str, dict]]] = {
    PoolConfig: ("Candidate pool", {
        "topk": {"help": "children proposed per expanded node"},
        "depth": {"help": "deepest candidate level"},
        "expand": {"help": "nodes expanded per level"},
    }),
    DecodeConfig: ("Decoding", {
        "decoder": {"help": "the selection rule"},
        "temperature": {"help": "0 is greedy", "metavar": "T"},
        "budget": {
            "help": "tree budget B: non-root nodes verified per round; auto: chosen each round from measured "
                    "acceptance and pass costs, up to --budget-max (0, plain decoding, included)",
            "metavar": "B|auto", "parse": "budget"},
        "max_new_tokens": {"help": "the output holds at most this many new tokens"},
        "seed": {"help": "sampling seed", "metavar": "S"},
        "budget_max": {"help": "the largest tree budget auto may choose", "metavar": "B"},
        "budget_prior": {
            "help": "where auto's acceptance prior comes from. session: the optimistic prior and the earlier decodes "
                    "of the same decoder, T and cap in this process; decode: the optimistic prior alone, so a "
                    "decode's choices do not depend on the decodes before it", "metavar": "session|decode"},
        "top_k": {
            "help": "at T > 0, sample among the K most probable tokens only (0: all)", "metavar": "K"},
        "top_p": {
            "help": "at T > 0, sample among the most probable tokens whose mass reaches P (1: all)", "metavar": "P"},
        "min_p": {
            "help": "at T > 0, sample among tokens at least P times as probable as the most probable (0: all)",
            "metavar": "P"},
        "stop": {
            "help": "end the output at the first of these strings in its text, which the text then stops just "
                    "before (repeatable)", "metavar": "TEXT"},
        "stop_token_ids": {
            "help": "end the output at the first of these token ids, as at an end-of-sequence token: the id is the "
                    "output's last, its text left out (comma-separated)", "metavar": "ID,ID", "parse": "token_ids"},
        "ignore_eos": {
            "help": "the target's end-of-sequence tokens do not end the output, which runs to --max-new-tokens unless "
                    "a stop string or stop token id ends it: outputs of one length, so that decoders' speeds compare "
                    "per prompt at T > 0"},
        "lend_cores": {
            "help": "on the CPU, while the target waits for a pool it tells the drafter, and a drafter sharing its "
                    "CPU takes every core until it sends the pool"},
        "cut_pools": {
            "help": "decoders with a root pass (all but draft and ar) ask for the pool as soon as the root pass is "
                    "done, and the drafter sends the levels it has grown once the one in progress ends: the target "
                    "does not wait for whole pools, and shallower pools may accept fewer tokens (outputs follow the "
                    "same law; records give each round's pool depth)"},
        "cut_weigh": {
            "help": "with --cut-pools: the drafter grows a further level the target waits for while it brings more "
                    "tokens than its wait costs, learnt from recent rounds (for a drafter on a device of its own: "
                    "on a shared CPU its levels also slow the target)"},
        "ahead": {
            "help": "draft ahead: while the target verifies a round, the drafter grows the next round's pool from "
                    "where the round most probably ends, and the next round takes it when the round ended there "
                    "(outputs are unchanged; records say how often it was right)"},
        "drafter_window": {
            "help": "the drafter starts on the context's last N tokens only (0: all of it): on long prompts a "
                    "shorter drafter prefill and cheaper drafter passes, for pools that may accept fewer tokens "
                    "(outputs follow the same law)", "metavar": "N"},
        "lookup": {
            "help": "context lookup: each round the target grafts into the pool up to N tokens copied from where the "
                    "context's last tokens occurred before, scored by how often such copies matched its draws so far "
                    "(0: off; outputs follow the same law; pipeline.lookup)", "metavar": "N"},
    }),
}
