"""The head training program: its prompts, draft vocabulary, training-time test (the runtime's and the
reference's arithmetic, step by step), and a whole run: deterministic, resumable, loadable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evaluation.prompts import BUILTIN
from models.eagle3_config import HeadConfig
from tests.models.eagle3_heads import VOCAB, head_config, head_weights, reference_path, small_target, target_features
from tests.training import killed_after
from training import cli
from training.prompts import training_prompts
from training.train import Schedule, build_head, train
from training.ttt import unrolled_loss, unrolled_rows
from training.vocab import draft_vocab

SPEC_BENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "spec_bench" / "question.jsonl"


def test_prompts_are_distinct_the_same_for_a_seed_and_another_for_another():
    a, b = training_prompts(300, 0), training_prompts(300, 0)
    assert a == b and len(set(a)) == 300
    assert training_prompts(300, 1) != a


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason="Spec-Bench's questions are not beside this checkout")
def test_no_prompt_is_an_evaluated_question():
    from evaluation.prompts import load_prompts

    evaluated = {p.text.strip() for p in load_prompts(f"spec-bench:{SPEC_BENCH}")} | {
        p.text.strip() for p in load_prompts("builtin")}
    turns = {t.strip() for line in SPEC_BENCH.read_text().splitlines() for t in json.loads(line)["turns"]}
    assert not (set(training_prompts(2000, 0)) & (evaluated | turns))


def test_draft_vocabulary_is_the_most_used_ids_sorted_with_ties_to_the_lower_id():
    counts = torch.tensor([0, 5, 1, 5, 0, 9, 1, 0])
    d2t, t2d, covered = draft_vocab(counts, 4)
    assert (torch.arange(4) + d2t).tolist() == [1, 2, 3, 5]  # 9, 5, 5, then the lower of the two 1s
    assert t2d.tolist() == [False, True, True, True, False, True, False, False]
    assert covered == pytest.approx(20 / 21)
    with pytest.raises(ValueError, match="`draft_vocab` must be between 1 and"):
        draft_vocab(counts, 9)


def _head(seed=1):
    cfg = head_config()
    w = head_weights(cfg, seed=seed)
    target = small_target()
    embed = target.get_input_embeddings().weight.detach()
    from training.train import Target

    t = Target(cfg, embed, target.get_output_embeddings().weight.detach(), target.get_decoder().norm.weight.detach(),
               (2, 4, 5))
    head = build_head(t, HeadConfig.from_dict(cfg), {k: v for k, v in w.items() if k not in ("d2t", "t2d")}, w["d2t"])
    return cfg, w, target, embed, head


def test_each_unrolled_step_is_the_reference_drafting_that_deep_after_each_position():
    """Step k, row i = the reference's row after committed tokens 0 .. i + 1 and the path of the answer's own
    next k tokens: the training-time test drafts what the runtime will draft."""
    cfg, w, target, embed, head = _head()
    tokens = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(3))
    feats = target_features(target, tokens.tolist())
    ids = torch.arange(cfg["draft_vocab_size"]) + w["d2t"]
    with torch.no_grad():
        steps = list(unrolled_rows(head, tokens, feats[:-1], 4))
    for k, logits in enumerate(steps):
        for i in range(len(tokens) - 2 - k):
            context, path = tokens[: i + 2].tolist(), tokens[i + 2: i + 2 + k].tolist()
            want = reference_path(cfg, w, embed, feats, context, path)[-1][ids]
            torch.testing.assert_close(logits[i], want, atol=2e-4, rtol=1e-4)


def test_the_loss_scores_only_answer_rows_whose_target_top_is_drafted():
    cfg, w, target, embed, head = _head()
    tokens = torch.randint(0, VOCAB, (12,), generator=torch.Generator().manual_seed(4))
    n, vd = len(tokens), cfg["draft_vocab_size"]
    rows = torch.randn(n - 1, vd)
    top = torch.arange(cfg["draft_vocab_size"])[rows.argmax(-1)] + w["d2t"][rows.argmax(-1)]
    t2d = w["t2d"].clone()
    scores = unrolled_loss(head, rows, tokens, 6, feats := target_features(target, tokens.tolist())[:-1], top,
                           t2d, 3, 0.8)
    assert scores.rows == [n - 6] * 3  # every step scores the answer's tokens 6 .. n - 1, each from a row k + 2 back
    whole = unrolled_loss(head, rows, tokens, 1, feats, top, t2d, 3, 0.8)
    assert whole.rows == [n - 2, n - 3, n - 4]  # from token 2 on, step k has n - 2 - k rows to draft from
    t2d[top[7]] = False  # the target's top after token 7 is no longer drafted: that row is not scored
    assert unrolled_loss(head, rows, tokens, 6, feats, top, t2d, 3, 0.8).rows[0] == n - 7


def _run(work: Path, out: Path, *extra: str, prompts: int | None = 6) -> int:
    return cli.main(["--target", "random:tiny", "--work", str(work), "--out", str(out),
                     *(["--prompts", str(prompts)] if prompts else []), "--max-new", "12", "--shard", "4",
                     "--draft-vocab", "64", "--epochs", "2", "--batch", "2", "--save-every", "1", *extra])


def test_a_run_is_deterministic_and_writes_a_head_the_runtime_loads(tmp_path):
    assert _run(tmp_path / "w1", tmp_path / "h1") == 0
    assert _run(tmp_path / "w2", tmp_path / "h2") == 0
    first = (tmp_path / "h1" / "model.safetensors").read_bytes()
    assert first == (tmp_path / "h2" / "model.safetensors").read_bytes()
    report = json.loads((tmp_path / "h1" / "training.json").read_text())
    assert report["data"]["prompts"] == 6 and len(report["curve"]) == 6 and (tmp_path / "h1" / "loss.png").is_file()

    from models.load import load
    from models.options import ModelOptions

    loaded = load(ModelOptions(model=f"eagle3:{tmp_path / 'h1'}", head_target="random:tiny"), "drafter")
    assert loaded.model.cfg.draft_vocab == 64 and loaded.model.w["fc.weight"].dtype == torch.float32


def test_a_killed_run_resumes_to_the_weights_of_an_unbroken_one(tmp_path, monkeypatch):
    assert _run(tmp_path / "whole", tmp_path / "h-whole") == 0
    monkeypatch.setattr(cli, "train", killed_after(3))
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "broken", tmp_path / "h-broken")
    monkeypatch.setattr(cli, "train", train)
    (tmp_path / "broken" / "answers-0001.pt").unlink()  # a shard lost too: answered again, the same
    assert _run(tmp_path / "broken", tmp_path / "h-broken") == 0
    assert ((tmp_path / "h-whole" / "model.safetensors").read_bytes()
            == (tmp_path / "h-broken" / "model.safetensors").read_bytes())


def test_a_run_killed_while_answering_keeps_the_time_of_the_shards_it_wrote(tmp_path, monkeypatch):
    real, calls = cli.answer_batch, []

    def killed(*args, **kw):  # two batches a shard (greedy, sampled): killed in the second shard
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(cli, "answer_batch", killed)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "w", tmp_path / "h")
    assert (tmp_path / "w" / "answers-0000.pt").exists() and not (tmp_path / "w" / "answers-0001.pt").exists()
    times = json.loads((tmp_path / "w" / "times.json").read_text())
    kept = times["answers_s"]
    assert kept > 0 and times["shards_s"] == {"answers-0000": kept}
    monkeypatch.setattr(cli, "answer_batch", real)
    assert _run(tmp_path / "w", tmp_path / "h") == 0
    seconds = json.loads((tmp_path / "h" / "training.json").read_text())["seconds"]
    assert seconds["answers_s"] > kept and seconds["train_s"] > 0
    assert seconds["shards_s"]["answers-0000"] == kept and set(seconds["shards_s"]) == {"answers-0000", "answers-0001"}
    assert sum(seconds["shards_s"].values()) == pytest.approx(seconds["answers_s"])


def test_bad_arguments_and_a_foreign_checkpoint_are_refused_in_one_line(tmp_path, capsys):
    assert cli.main(["--work", str(tmp_path), "--out", str(tmp_path / "h"), "--prompts", "0"]) == 2
    assert "`prompts`" in capsys.readouterr().err
    assert cli.main(["--work", str(tmp_path), "--out", str(tmp_path / "h"), "--shard", "0"]) == 2
    assert "`shard` must be at least 1" in capsys.readouterr().err
    assert cli.main(["--work", str(tmp_path), "--out", str(tmp_path / "h"), "--lr", "-1"]) == 2
    assert "`lr` must be positive" in capsys.readouterr().err
    assert _run(tmp_path / "w", tmp_path / "h") == 0
    assert _run(tmp_path / "w", tmp_path / "h", "--lr", "0.01") == 2
    assert "another schedule or data; delete it" in capsys.readouterr().err
    assert _run(tmp_path / "w", tmp_path / "h", "--max-new", "20") == 2  # the kept answers were answered otherwise
    assert "holds answers of" in capsys.readouterr().err and (tmp_path / "w" / "answers-0000.pt").exists()


@pytest.mark.parametrize("device, message", [
    ("tpu", "`device` must be cpu, cuda or cuda:N, not 'tpu'"),
    pytest.param("cuda", "`device` cuda: torch sees no GPU here", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="a GPU is here")),
])
def test_a_device_that_cannot_serve_is_refused_in_one_line(tmp_path, capsys, device, message):
    from training import agreement

    assert _run(tmp_path / "w", tmp_path / "h", "--device", device) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "w").exists()
    assert agreement.main(["--head", str(tmp_path), "--target", "random:tiny", "--prompts", "builtin",
                           "--device", device]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_checkpoint_of_other_answers_is_refused_though_their_count_is_the_same(tmp_path, capsys):
    mine = tmp_path / "mine.txt"
    mine.write_text("Tell me about tides.\nName three rivers.\nWhy is snow white?\n")
    assert _run(tmp_path / "w", tmp_path / "h", "--prompt-source", str(mine), prompts=None) == 0
    mine.write_text("Tell me about tides.\nName three lakes.\nWhy is snow white?\n")
    assert _run(tmp_path / "w", tmp_path / "h", "--prompt-source", str(mine), prompts=None) == 2
    assert "was written by a run with another schedule or data" in capsys.readouterr().err


def test_the_shard_size_defaults_to_the_work_folders_answers_else_64(tmp_path, capsys):
    def run(work, *extra):
        return cli.main(["--target", "random:tiny", "--work", str(work), "--out", str(tmp_path / f"h-{work.name}"),
                         "--prompts", "4", "--max-new", "8", "--draft-vocab", "64", "--epochs", "1", *extra])

    assert run(tmp_path / "w", "--shard", "2") == 0
    assert run(tmp_path / "w") == 0  # resumed with the shard its answers were made with
    assert json.loads((tmp_path / "w" / "answers.json").read_text())["shard"] == 2
    assert run(tmp_path / "w", "--shard", "4") == 2 and '"shard": 2' in capsys.readouterr().err
    assert run(tmp_path / "fresh") == 0
    assert json.loads((tmp_path / "fresh" / "answers.json").read_text())["shard"] == cli.SHARD == 256


def test_a_target_that_cannot_be_loaded_writes_nothing(tmp_path, capsys):
    assert cli.main(["--target", str(tmp_path / "no-such-checkpoint"), "--work", str(tmp_path / "w"),
                     "--out", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err  # (beside the loader's log line, where an earlier test set up logging)
    assert "cannot be loaded on cpu" in err and err.count("error:") == 1 and not (tmp_path / "w").exists()


def test_answers_made_in_another_dtype_are_not_resumed(tmp_path, capsys):
    assert _run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 0
    manifest = json.loads((tmp_path / "w" / "answers.json").read_text())
    assert manifest["dtype"] == "float32"
    del manifest["dtype"]  # a manifest written before the dtype was kept: its answers were float32's
    (tmp_path / "w" / "answers.json").write_text(json.dumps(manifest))
    assert _run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 0
    assert _run(tmp_path / "w", tmp_path / "h", "--epochs", "1", "--dtype", "bfloat16") == 2
    assert '"dtype": "bfloat16"' in capsys.readouterr().err


def test_the_learning_rate_warms_up_then_decays_to_its_floor():
    s = Schedule(lr=1.0, warmup=10, min_lr=0.1)
    assert s.lr_at(0, 100) == pytest.approx(0.1) and s.lr_at(9, 100) == pytest.approx(1.0)
    assert s.lr_at(99, 100) == pytest.approx(0.1, abs=1e-3) and s.lr_at(55, 100) < s.lr_at(20, 100)


def test_agreement_counts_each_row_against_the_targets_top_token(tmp_path, capsys):
    from training import agreement
    from training.distill import read_shard

    assert _run(tmp_path / "w", tmp_path / "h") == 0
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": str(i), "prompt": t, "category": c}) + "\n" for i, (t, c) in
                                 enumerate([("Name a color.", "writing"), ("Count to three.", "translation"),
                                            ("Say hello.", "roleplay")])))
    assert agreement.main(["--head", str(tmp_path / "h"), "--target", "random:tiny", "--prompts", str(questions),
                           "--limit", "3", "--max-new", "8", "--steps", "2", "--work", str(tmp_path / "w")]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["prompts"] == 3 and report["training_shards"] == 2
    by_group = report["held_out_by_group"]
    assert list(by_group) == ["mt_bench", "translation"]  # writing and roleplay are MT-bench's
    for k in range(2):
        assert sum(g["rows"][k] for g in by_group.values()) == report["held_out"]["rows"][k]
        assert (sum(g["top1"][k] * g["rows"][k] for g in by_group.values())
                == pytest.approx(report["held_out"]["top1"][k] * report["held_out"]["rows"][k]))
    for name in ("held_out", "training"):
        r = report[name]
        assert len(r["rows"]) == 2 and r["rows"][0] == r["rows"][1] > 0  # each answer token, from k + 2 back
        assert all(0 <= a <= b <= 1 for a, b in zip(r["top1"], r["top3"]))

    # the first step, row by row: the draft after answer token j (j >= start) against the target's top after it
    from models.eagle3 import Eagle3Head
    from models.eagle3_config import read_head

    cfg, weights = read_head(tmp_path / "h")
    model, _ = cli.load_target("random:tiny")
    head = Eagle3Head.build(cfg, weights, model.get_input_embeddings().weight.detach().float(), "cpu", torch.float32)
    answers = read_shard(tmp_path / "w" / "answers-0000.pt")
    rows = hits = 0
    for a in answers:
        with torch.inference_mode():
            first = next(unrolled_rows(head, a.tokens, a.features.float(), 1))  # row i drafts token i + 2
        for token in range(max(a.start, 2), len(a.tokens)):
            rows += 1
            hits += int(head.ids[first[token - 2].argmax()] == a.argmax[token - 1])
    direct = agreement.agreement(head, answers, 1)
    assert direct["rows"] == [rows] and direct["top1"][0] == pytest.approx(hits / rows)


def test_a_head_against_another_is_scored_on_the_same_answers_with_a_paired_interval(tmp_path, capsys):
    from training import agreement

    assert _run(tmp_path / "w", tmp_path / "h") == 0
    assert _run(tmp_path / "w1", tmp_path / "h1", "--seed", "1") == 0
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": str(i), "prompt": f"Say {w} twice."}) + "\n"
                                 for i, w in enumerate(["red", "blue", "one", "two", "cat", "dog"])))
    common = ["--target", "random:tiny", "--prompts", str(questions), "--limit", "6", "--max-new", "8", "--steps", "2"]
    assert agreement.main(["--head", str(tmp_path / "h"), *common, "--against", str(tmp_path / "h1")]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert agreement.main(["--head", str(tmp_path / "h1"), *common]) == 0
    alone = json.loads(capsys.readouterr().out.splitlines()[-1])
    versus = report["against"]
    assert versus["held_out"] == alone["held_out"] and versus["prompts"] == 6
    assert versus["held_out_by_group"] == alone["held_out_by_group"]
    assert versus["top1_step1"] == pytest.approx(report["held_out"]["top1"][0])
    assert versus["gain"] == pytest.approx(report["held_out"]["top1"][0] / alone["held_out"]["top1"][0] - 1)
    assert versus["low"] <= versus["gain"] <= versus["high"]

    assert agreement.main(["--head", str(tmp_path / "h"), *common[:-5], "1", *common[-4:], "--against",
                           str(tmp_path / "h1")]) == 0  # one prompt: figures, no interval
    out = capsys.readouterr().out
    assert json.loads(out.splitlines()[-1])["against"]["interval"] == "none (fewer than 2 prompts with rows)"
    assert "no gain" in out
    assert agreement.main(["--head", str(tmp_path / "h"), *common, "--against", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0] and "nowhere" in err[0]


def test_a_heads_gain_is_the_ratio_of_hits_over_prompts_with_rows():
    from training.agreement import compared

    def counts(rows, hits):
        return torch.tensor([[rows, 9], [hits, 9], [hits, 9]])

    mine = [counts(10, 4), counts(20, 8), counts(0, 0), counts(5, 2), counts(10, 6), counts(8, 4)]
    theirs = [counts(10, 2), counts(20, 4), counts(0, 0), counts(5, 1), counts(10, 3), counts(8, 2)]
    got = compared(mine, theirs)
    assert got["prompts"] == 5 and got["gain"] == pytest.approx(1.0) and got["low"] == got["high"] == pytest.approx(1.0)
    assert got["top1_step1"] == pytest.approx(24 / 53) and got["against_top1_step1"] == pytest.approx(12 / 53)
    assert compared(mine[:3], theirs[:3])["interval"] == "none (2 prompts)"


@pytest.mark.parametrize("args, message", [
    (["--prompts", "builtin", "--limit", "0"], "--limit must be at least 1"),
    ([], "--prompts: name at least one"),
    (["--prompts", "builtin", "--work", "{tmp}"], "holds no training shard"),
])
def test_agreement_refuses_bad_arguments_in_one_line(tmp_path, capsys, args, message):
    from training import agreement

    with pytest.raises(SystemExit) as exit_:
        agreement.main(["--head", str(tmp_path), "--target", "random:tiny",
                        *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_context_prompts_hand_the_target_its_answers_and_draw_the_same_first_ones():
    from training.prompts import CONTEXT, PASSAGE_CHARS, context_prompts

    texts = ["Bees make honey. " * 100, "A short answer.", "   "]
    six = context_prompts(texts, 6, 0)
    assert len(set(six)) == 6 and context_prompts(texts, 4, 0) == six[:4] and context_prompts(texts, 6, 1) != six
    assert all(any(p == t.format(x=x) for t in CONTEXT for x in (texts[1], texts[0][:PASSAGE_CHARS].rsplit(" ", 1)[0]))
               for p in six)
    with pytest.raises(ValueError, match="only 12 distinct context prompts"):
        context_prompts(texts, 13, 0)


def test_context_prompts_are_answered_in_shards_of_their_own_and_trained_on(tmp_path):
    from training.distill import read_shard, write_shard

    assert _run(tmp_path / "w", tmp_path / "h", "--context-prompts", "3") == 0
    report = json.loads((tmp_path / "h" / "training.json").read_text())
    assert report["data"]["context_prompts"] == 3 and report["data"]["answers_greedy"] == 3 + 2
    assert len(report["curve"]) == 2 * 5  # 9 answers, 2 a step, 2 epochs
    model, tokenizer = cli.load_target("random:tiny")
    texts = cli.passages(read_shard(tmp_path / "w" / "answers-0000.pt") + read_shard(tmp_path / "w" / "answers-0001.pt"),
                         tokenizer)
    context = read_shard(tmp_path / "w" / "context-0000.pt")
    assert len(context) == 3
    for a in context:  # each prompt holds one of the greedy answers' texts
        assert any(t and t[:20] in tokenizer.prompt_text(a.tokens[: a.start].tolist()) for t in texts)

    # a shard that answers other prompts (another --prompts or --seed wrote it) is answered again
    first = (tmp_path / "w" / "answers-0000.pt").read_bytes()
    write_shard(tmp_path / "w" / "answers-0000.pt", context[:4])
    (tmp_path / "w" / "checkpoint.pt").unlink()
    assert _run(tmp_path / "w", tmp_path / "h2", "--context-prompts", "3") == 0
    assert (tmp_path / "w" / "answers-0000.pt").read_bytes() == first
    assert (tmp_path / "h2" / "model.safetensors").read_bytes() == (tmp_path / "h" / "model.safetensors").read_bytes()


def test_a_users_prompt_files_take_the_templates_place_in_order_each_text_once(tmp_path, capsys):
    from training.distill import read_shard

    lines = tmp_path / "mine.txt"
    lines.write_text("Tell me about tides.\n\nName three rivers.\nTell me about tides.\n")
    rows = tmp_path / "more.jsonl"
    rows.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in ("Why is snow white?", "Count to five.")))
    sources = ["--prompt-source", str(lines), "--prompt-source", str(rows)]
    assert _run(tmp_path / "w", tmp_path / "h", *sources, prompts=3) == 0
    report = json.loads((tmp_path / "h" / "training.json").read_text())
    assert report["data"]["prompts"] == 3 and report["data"]["prompt_sources"] == [str(lines), str(rows)]
    _, tokenizer = cli.load_target("random:tiny")
    asked = [a.tokens[: a.start].tolist() for a in read_shard(tmp_path / "w" / "answers-0000.pt")]
    first = ("Tell me about tides.", "Name three rivers.", "Why is snow white?")
    assert asked == [tokenizer.chat_ids([t]) for t in first]
    capsys.readouterr()

    # without --prompts every distinct prompt; a source this project evaluates on is used, with a warning
    assert _run(tmp_path / "w2", tmp_path / "h2", *sources, "--prompt-source", "builtin", prompts=None) == 0
    assert "warning: builtin's prompts are among those sweeps evaluate on" in capsys.readouterr().err
    assert json.loads((tmp_path / "h2" / "training.json").read_text())["data"]["prompts"] == 4 + len(BUILTIN)


@pytest.mark.parametrize("content, extra, message", [
    ("One prompt.\n", ["--prompts", "2"], "holds 1 distinct prompts, fewer than the 2 asked for"),
    ('{"text": "no prompt field"}\n', [], ':1: needs a non-empty string "prompt"'),
    (None, [], "prompt file"),
])
def test_a_prompt_source_that_cannot_serve_is_refused_in_one_line(tmp_path, capsys, content, extra, message):
    path = tmp_path / ("p.jsonl" if content and content.startswith("{") else "p.txt")
    if content is not None:
        path.write_text(content)
    assert cli.main(["--target", "random:tiny", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "h"),
                     "--prompt-source", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "w").exists()


def mapped_files(tensors) -> set[str]:
    """The files whose mappings in this process hold each tensor's data (an empty name where one is not)."""
    spans = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            spans.append((start, end, fields[5]))
    return {next((name for s, e, name in spans if s <= t.data_ptr() < e), "") for t in tensors}


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's memory map (Linux)")
def test_a_runs_answers_are_mapped_from_their_shards_from_the_first_run_on(tmp_path, monkeypatch):
    seen, real = [], cli.train

    def train(answers, *args, **kw):
        seen.append(mapped_files(a.features for a in answers))
        return real(answers, *args, **kw)

    monkeypatch.setattr(cli, "train", train)
    assert _run(tmp_path / "w", tmp_path / "h") == 0  # answers made by this run
    assert _run(tmp_path / "w", tmp_path / "h") == 0  # answers read back
    shards = {str((tmp_path / "w" / f"answers-000{i}.pt").resolve()) for i in range(2)}
    assert seen == [shards, shards]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's memory map (Linux)")
def test_a_shards_answers_are_mapped_from_its_file_not_read_into_memory(tmp_path):
    from training.distill import Answer, read_shard, write_shard

    n, width = 40, 12
    made = [Answer(torch.arange(n) + k, 5, torch.randn(n - 1, 3 * width).bfloat16(), torch.randn(n - 1, width)
                   .bfloat16(), torch.arange(n - 1, dtype=torch.int32)) for k in range(3)]
    path = tmp_path / "answers-0000.pt"
    write_shard(path, made)
    read = read_shard(path)
    assert all(torch.equal(getattr(a, f), getattr(b, f)) for a, b in zip(made, read)
               for f in ("tokens", "features", "last", "argmax"))
    assert mapped_files(a.features for a in read) == {str(path.resolve())}
