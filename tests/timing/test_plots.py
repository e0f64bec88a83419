"""Properties of the report's plots on synthetic runs: each plot is written when the run has its data and
not otherwise, and the report names each written plot, and only those, with what it shows."""

from __future__ import annotations

import pytest

from evaluation.summary import analyse, category_group
from timing import report
from timing.options import ReportOptions

MAIN = {"gains.png", "timeline.png", "speed.png", "acceptance.png", "tree_sizes.png", "phases.png"}
BY_CATEGORY = {"speed_by_category.png", "acceptance_by_category.png", "tree_sizes_by_category.png",
               "phases_by_category.png"}


def run(make_record, decoders, budgets):
    recs = []
    for b in budgets:
        for i, category in enumerate(("qa", "rag", "qa")):
            for d in decoders:
                plain = d == "ar"
                recs.append(make_record(f"p/{i}", d, budget=b, category=category, tokens=8 + i, seconds=1.0 + i / 10,
                                        tree_sizes=(0, 0) if plain else (8, 0), accepted=(0, 0) if plain else (2, 0),
                                        budgets=(0, 0) if plain else (8, 0)))
    return recs


def draw(records, tmp_path, by_category=False):
    settings = [analyse(records, 0.0, b, n_resamples=50) for b in dict.fromkeys(r.budget for r in records)]
    cats = {s.label: [analyse(records, 0.0, s.budget, category_group(c), n_resamples=50) for c in ("qa", "rag")]
            for s in settings} if by_category else {}
    written = report.draw(settings, cats, ReportOptions(resamples=50), tmp_path)
    assert {p.name for p in tmp_path.glob("*.png")} == {name for name, _ in written}
    return settings, cats, written


@pytest.fixture(scope="module")
def fixed_run(make_record, tmp_path_factory):
    """ar and root-draw at B = 8, drawn: (records, settings, by category, written plots)."""
    records = run(make_record, ("ar", "root-draw"), (8,))
    return records, *draw(records, tmp_path_factory.mktemp("fixed"))


def test_a_fixed_budget_run_has_every_plot_but_tree_sizes(fixed_run):
    assert {name for name, _ in fixed_run[3]} == MAIN - {"tree_sizes.png"}


@pytest.mark.slow
def test_an_auto_run_by_category_has_every_plot(make_record, tmp_path):
    _, _, written = draw(run(make_record, ("ar", "root-draw"), (8, "auto")), tmp_path, by_category=True)
    assert {name for name, _ in written} == MAIN | BY_CATEGORY


def test_plain_decoding_alone_draws_no_gain_acceptance_or_tree_size(make_record, tmp_path):
    _, _, written = draw(run(make_record, ("ar",), ("auto",)), tmp_path, by_category=True)
    assert {name for name, _ in written} == {"timeline.png", "speed.png", "phases.png", "speed_by_category.png",
                                             "phases_by_category.png"}


def test_the_report_names_each_written_plot_with_what_it_shows(fixed_run, tmp_path):
    records, settings, cats, written = fixed_run
    config = {"models": {"target": {"model": "mock", "device": "cpu", "dtype": "float32"}},
              "pool": {"topk": 4, "depth": 3, "expand": 2}, "sweep": {"max_new_tokens": 24}}
    text = report.render([str(tmp_path)], config, records, settings, cats, ReportOptions(), written)
    for name, caption in written:
        assert f"- `{name}`: {caption}\n\n![{name}]({name})" in text
    assert "tree_sizes.png" not in text and text.count("![") == len(written)


def test_a_setting_whose_every_decoder_ran_plain_draws_no_tree_sizes_and_marks_its_gains(make_record, tmp_path):
    plain = dict(tree_sizes=(0, 0), accepted=(0, 0), budgets=(0, 0))
    records = [make_record(f"p/{i}", d, budget="auto", tokens=8, seconds=1.0 + (d == "ar"), **plain)
               for i in range(3) for d in ("ar", "root-draw")]
    settings, _, written = draw(records, tmp_path)
    assert "tree_sizes.png" not in {name for name, _ in written}  # one bar at 0 per decoder says nothing
    from timing import figures

    assert figures.gain_marks(settings[0]) == {("root-draw", "ar"): "same work"}
    assert figures.plain_only(settings)["root-draw"].tolist() == [True]  # its τ of 1 holds by construction


def test_only_the_rules_whose_tree_holds_the_draw_accept_depth_one_by_construction():
    from timing.figures import by_construction

    assert [d for d in ("ar", "draft", "pearl", "pearl-top1", "root-draw", "root") if by_construction(d)] == [
        "pearl", "pearl-top1", "root-draw"]


@pytest.fixture
def figures_drawn(monkeypatch):
    """The figures report.draw saves, by file name, kept open for their objects to be read."""
    from timing import plots

    kept = {}
    real = plots._save

    def save(fig, path, *args, **kwargs):
        kept[path.name] = fig
        texts = [t.get_text() for t in fig.texts]
        legends = [[t.get_text() for t in leg.get_texts()] for leg in fig.legends]
        ticks = [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes if ax.get_visible()]
        kept[path.name] = (texts, legends, ticks)
        return real(fig, path, *args, **kwargs)
    monkeypatch.setattr(plots, "_save", save)
    return kept


def test_the_timeline_labels_every_panels_scale_and_names_only_what_it_draws(make_record, tmp_path, figures_drawn):
    draw(run(make_record, ("ar", "root-draw"), (8, 16)), tmp_path)
    _, legends, ticks = figures_drawn["timeline.png"]
    assert len(ticks) == 2 and all(any(t for t in panel) for panel in ticks)  # the top panel's too
    assert "select the tree" in legends[0] and "plain round's pass" not in legends[0]  # root-draw's tree rounds only


def test_tree_sizes_says_they_are_not_the_budgets_and_phases_flag_rows_of_few_rounds(make_record, tmp_path,
                                                                                       figures_drawn):
    from timing.plots import TREE_SIZE_NOTE

    two_prompts = [r for r in run(make_record, ("ar", "root-draw"), ("auto",)) if r.prompt_id != "p/2"]
    draw(two_prompts, tmp_path)  # root-draw: two tree rounds and two plain ones
    assert TREE_SIZE_NOTE in [" ".join(t.split()) for t in figures_drawn["tree_sizes.png"][0]]
    texts, _, _ = figures_drawn["phases.png"]
    assert any(t.startswith("⚠ few: a row resting on 2 rounds or fewer") for t in texts)


def test_every_caption_fits_its_figure_and_clears_its_panels(make_record, tmp_path, monkeypatch):
    """A caption runs past neither edge of its figure (one panel's figure is 4 inches wide) nor into the panels'
    tick labels above it."""
    from timing import plots

    save, checked = plots._save, []

    def checking(fig, path, top=1.0, bottom=0.0):
        fig.tight_layout(rect=(0, bottom, 1, top))
        renderer = fig.canvas.get_renderer()
        panels = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes if ax.get_visible())
        for text in fig.texts:
            box = text.get_window_extent(renderer)
            assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y0 >= 0, (path.name, text.get_text())
            assert box.y1 <= panels + 1, (path.name, text.get_text())
            checked.append(path.name)
        return save(fig, path, top, bottom)

    monkeypatch.setattr(plots, "_save", checking)
    draw(run(make_record, ("ar", "root-draw"), (8, "auto")), tmp_path)
    assert {"gains.png", "speed.png", "acceptance.png", "tree_sizes.png"} <= set(checked)
