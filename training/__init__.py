"""Training EAGLE-3 heads for a target this runtime serves, by self-distillation on the CPU or a GPU.

    prompts  -> the training prompts, made here (none from a set this project evaluates on)
    distill  -> the target's own answers to them, then its features and output rows for every token
    vocab    -> the draft vocabulary from the answers' token counts (d2t, t2d)
    ttt      -> the training-time test: several drafting steps unrolled, the head's outputs fed back
    train    -> the loop: resumable, deterministic for a seed, writing a head `eagle3:PATH` loads
    cli      -> `launch/pair.sh train-head`
    agreement    -> `python -m training.agreement`: a head's agreement with its target on other prompts
    openai_evals -> `python -m training.openai_evals`: a prompt file drawn from OpenAI's evals registry
"""
