"""Attention insight: averaged maps and plots from a model, per-recommendation attention, and the two CLI
commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attnrec import Recommender
from attnrec.cli.main import app
from attnrec.data.build import from_columns
from attnrec.data.split import leave_one_out
from attnrec.evaluation.attention import AttentionSummary, attention_summary, histories_from_data
from attnrec.recommend.explain_rec import explain_recommendation

CONFIGS = {
    "sasrec": {"hidden": 16, "n_heads": 2, "max_len": 20, "dropout": 0.1},
    "bert4rec": {"hidden": 16, "n_heads": 2, "max_len": 20, "dropout": 0.1, "attn_dropout": 0.1},
}


def summary(rec: Recommender, **kw) -> AttentionSummary:  # type: ignore[no-untyped-def]
    """The attention summary of ``rec``'s model over its stored histories (the CLI's default)."""
    assert rec.histories_ is not None and rec.users_ is not None and rec.max_len is not None
    return attention_summary(
        rec.core,
        rec.histories_,
        rec.users_.to_list(),
        name=rec.name,
        max_len=rec.max_len,
        device=rec.device,
        **kw,
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory):  # type: ignore[no-untyped-def]
    from attnrec.data.demo import make_demo

    data = make_demo(n_users=120, n_items=60, seed=5, mean_length=15)
    split = leave_one_out(data)
    out = {}
    for name, cfg in CONFIGS.items():
        rec = Recommender(name, cfg, train={"max_epochs": 1, "batch_size": 64, "device": "cpu"})
        rec.fit(data, split, progress=False)
        path = tmp_path_factory.mktemp(name)
        rec.save(path)
        out[name] = (rec, path)
    return out


@pytest.mark.parametrize("name", ["sasrec", "bert4rec"])
def test_summary_is_a_proper_average(models, name) -> None:  # type: ignore[no-untyped-def]
    rec, _ = models[name]
    s = summary(rec, n_users=50, seed=1)
    n_layers, n_heads, t = 2, 2, 20
    assert s.absolute.shape == (n_layers, n_heads, t, t) and s.relative.shape == (
        n_layers,
        n_heads,
        2 * t - 1,
    )
    assert s.n_users == 50 and len(s.users) == 50
    seen = s.query_counts > 0
    assert np.allclose(s.absolute[:, :, seen].sum(-1), 1.0, atol=1e-5), "each real query's weights sum to 1"
    assert np.allclose(s.relative.sum(-1), 1.0, atol=1e-5), "mean mass over offsets sums to 1"
    assert s.query_counts[-1] == 50, "the predicting position is real for every user"
    assert s.predicting == (
        "[mask] after the history" if name == "bert4rec" else "the most recent history item"
    )
    future = np.triu(np.ones((t, t), dtype=bool), 1)
    if name == "sasrec":
        assert s.absolute[..., future].max() == 0, "SASRec is causal"
        assert s.relative[..., t:].max() == 0
    else:
        assert s.absolute[..., future].max() > 0, "BERT4Rec attends to later positions"
    assert np.allclose(s.recent_share(t), 1.0, atol=1e-5)
    d = s.to_dict(window=5)
    assert np.asarray(d["absolute"]).shape == (n_layers, n_heads, 5, 5) and len(d["offsets"]) == 9
    json.dumps(d)


def test_same_seed_same_users(models) -> None:  # type: ignore[no-untyped-def]
    rec, _ = models["bert4rec"]
    a, b = summary(rec, n_users=30, seed=2), summary(rec, n_users=30, seed=2)
    assert a.users == b.users and np.array_equal(a.absolute, b.absolute)
    c = summary(rec, n_users=30, seed=2, batch_size=4)  # batches padded to different widths
    assert np.allclose(a.absolute, c.absolute, atol=1e-5) and np.array_equal(a.query_counts, c.query_counts)


def test_plots_are_written(models, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    from attnrec.evaluation.attention import plot_attention

    rec, _ = models["sasrec"]
    paths = plot_attention(summary(rec, n_users=20), tmp_path, window=8)
    assert [p.name for p in paths] == ["attention_heatmap.png", "attention_offsets.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


@pytest.mark.parametrize("name", ["sasrec", "bert4rec"])
def test_explain_lists_history_items_by_attention(models, name) -> None:  # type: ignore[no-untyped-def]
    rec, _ = models[name]
    user = rec.users_.to_list()[3]
    hist = rec.items_.to_external(rec.histories_[3])
    ex = explain_recommendation(rec, user=user, k=5, top=100, method="attention")
    assert ex.recommendation.items == rec.recommend(user=user, k=5).items
    assert {a.item for a in ex.attended} <= set(hist)
    weights = [a.weight for a in ex.attended]
    assert weights == sorted(weights, reverse=True) and all(0 <= w <= 1 for w in weights)
    if len(hist) < 19:  # the whole history fits in the window: attention is fully accounted for
        assert len(ex.attended) == len(hist)
        assert abs(sum(weights) + ex.self_weight - 1) < 1e-5
        rollout = sum(a.rollout for a in ex.attended)  # the rest stays on BERT4Rec's [mask]
        assert rollout <= 1 + 1e-5 and (name == "bert4rec" or abs(rollout - 1) < 1e-5)
    newest = [a for a in ex.attended if a.back == 0]
    assert newest and newest[0].item == hist[-1]
    assert (ex.self_weight > 0) == (name == "bert4rec")
    assert ex.predicting == (
        "[mask] after the history" if name == "bert4rec" else "the most recent history item"
    )
    json.dumps(ex.to_dict())


def test_explain_ad_hoc_history(models) -> None:  # type: ignore[no-untyped-def]
    rec, _ = models["bert4rec"]
    items = rec.items_.to_list()[:4]
    ex = explain_recommendation(rec, history=[*items, "no-such-item"], k=3, method="attention")
    assert ex.recommendation.unknown_items == ["no-such-item"] and ex.history_length == 4
    assert {a.item for a in ex.attended} == set(items)
    with pytest.raises(ValueError, match="no known items"):
        explain_recommendation(rec, history=["no-such-item"])


def test_histories_from_other_data_drop_unknown_items(models) -> None:  # type: ignore[no-untyped-def]
    rec, _ = models["sasrec"]
    known = rec.items_.to_list()
    data = from_columns(["a", "a", "a", "b", "c"], [known[0], "zzz", known[2], "zzz", known[1]])
    seqs, names = histories_from_data(rec.items_, data)
    assert names == ["a", "b", "c"]
    assert list(seqs.lengths()) == [2, 0, 1]
    assert rec.items_.to_external(seqs[0]) == [known[0], known[2]]
    s = attention_summary(rec.core, seqs, names, name=rec.name, max_len=rec.max_len, n_users=10)
    assert s.users == ["a", "c"]


def test_models_without_attention_are_refused() -> None:
    from attnrec.data.demo import make_demo

    data = make_demo(n_users=30, n_items=20, seed=1, mean_length=6)
    pop = Recommender("pop").fit(data, progress=False)
    assert pop.histories_ is not None
    with pytest.raises(ValueError, match="pop: the model has no attention weights"):
        attention_summary(pop.core, pop.histories_, pop.users_.to_list(), name="pop", max_len=10)


def test_cli_attention_and_explain(models, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, path = models["bert4rec"]
    runner = CliRunner()
    res = runner.invoke(
        app, ["attention", "--model", str(path), "--out", str(tmp_path / "att"), "--users", "15", "--no-plot"]
    )  # plotting itself is tested above
    assert res.exit_code == 0, res.output
    assert "on last 5" in res.output
    for f in ("attention.json", "attention.npz"):
        assert (tmp_path / "att" / f).exists()
    assert json.loads((tmp_path / "att" / "attention.json").read_text())["n_users"] == 15
    res = runner.invoke(
        app,
        ["explain-rec", "--model", str(path), "--user", "1", "-k", "3", "--json", "--method", "attention"],
    )
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert len(payload["recommended"]) == 3 and payload["attended"]
    res = runner.invoke(app, ["explain-rec", "--model", str(path), "--user", "1", "--method", "attention"])
    assert res.exit_code == 0 and "most attended" in res.output
    assert "[mask]" in res.output, "rich markup must not swallow the token's name"
    res = runner.invoke(app, ["explain-rec", "--model", str(path), "--user", "nobody"])
    assert res.exit_code == 2 and "unknown user" in res.output
