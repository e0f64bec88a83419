"""Each output token's log-probability under the target, read from the very row the verifier drew it from (an
observer for pipeline.decode.decode: no pass of its own)."""

from __future__ import annotations

import torch

from pipeline.decode import Step


class TokenLogprobs:
    """Keeps, per emitted token, [[token, log-probability, rank], then the `top` most likely tokens of its row
    likewise], ranks from 1 (the most likely). The row of a round's j-th emitted token is the root's for j = 0
    and the j-th accepted node's after: the target's logits there, after the sampling filters where a decode
    applies them (top_k, top_p, min_p at a temperature above 0), before the temperature otherwise."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.entries: list[list[list[float]]] = []

    def __call__(self, step: Step, root: int, budget: int) -> None:
        rows = step.root_row[None]  # (1, V)
        if step.accepted:  # (1 + accepted, V): each accepted node's row draws the token after it
            rows = torch.cat([rows, step.tree_rows[torch.as_tensor(step.accepted, device=rows.device)]])
        logp = torch.log_softmax(rows.float(), dim=-1)  # (m, V)
        tokens = torch.as_tensor(step.emitted, device=logp.device)  # (m,)
        chosen = logp.gather(1, tokens[:, None])  # (m, 1)
        rank = (logp > chosen).sum(-1, keepdim=True) + 1  # (m, 1)
        best, ids = logp.topk(self.top, dim=-1)  # (m, top)
        table = torch.cat([tokens[:, None].double(), chosen.double(), rank.double(), ids.double(), best.double()], 1)
        for row in table.cpu().tolist():  # a host read (a sync), outside the decode's time
            top = [[int(row[3 + i]), row[3 + self.top + i], i + 1] for i in range(self.top)]
            self.entries.append([[int(row[0]), row[1], int(row[2])], *top])

    def of(self, tokens: int) -> list[list[list[float]]]:
        """The entries of the output's first `tokens` tokens (those past a stop or the limit left out)."""
        return self.entries[:tokens]
