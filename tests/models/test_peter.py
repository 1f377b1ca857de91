"""PETER: the mask, the losses, training through the loop, save/load (decoding: test_peter_decoding.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnrec.checkpoint import MANIFEST
from attnrec.data.reviews import encode_reviews, from_records, random_split
from attnrec.data.schema import DataError
from attnrec.models.nn.masks import peter_mask
from attnrec.models.peter import BOS_ID, EOS_ID, PAD_ID, PETER, PETERConfig
from attnrec.models.registry import get_spec, list_models
from attnrec.recommend.explainer import DAMPINGS, DECODINGS, Decoding, Explainer, damped_offsets

TINY = {"emsize": 16, "n_heads": 2, "ffn": 32, "dropout": 0.0}


def test_peter_mask_is_causal_plus_user_sees_item() -> None:
    m = peter_mask(6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    assert m[0, 1] and m[1, 0]  # user and item see each other
    diff = (m != causal).nonzero().tolist()
    assert diff == [[0, 1]]  # the only difference from a plain causal mask
    assert not m[0, 2:].any() and not m[1, 2:].any()  # IDs never see words
    for t in range(2, 6):  # words see the IDs, earlier words and themselves only
        assert m[t, : t + 1].all() and not m[t, t + 1 :].any()
    assert torch.equal(peter_mask(6, peter=False), causal)


def test_mask_is_what_the_model_uses() -> None:
    """Changing a later word never changes earlier outputs; changing the item changes the user position."""
    torch.manual_seed(0)
    model = PETER(PETERConfig(**TINY), n_users=3, n_items=4, n_words=20).eval()
    u, i = torch.tensor([0]), torch.tensor([1])
    w1 = torch.tensor([[BOS_ID, 5, 6, 7]])
    w2 = torch.tensor([[BOS_ID, 5, 9, 9]])
    h1, h2 = model.encode(u, i, None, w1), model.encode(u, i, None, w2)
    torch.testing.assert_close(h1[:, :4], h2[:, :4])  # positions up to word 5 are identical
    assert not torch.allclose(h1[:, 4], h2[:, 4])
    h3 = model.encode(u, torch.tensor([2]), None, w1)
    assert not torch.allclose(h1[:, 0], h3[:, 0])  # the user position sees the item
    causal = PETER(PETERConfig(**TINY, peter_mask=False), 3, 4, 20).eval()
    causal.load_state_dict(model.state_dict())
    hc1, hc3 = causal.encode(u, i, None, w1), causal.encode(u, torch.tensor([2]), None, w1)
    torch.testing.assert_close(hc1[:, 0], hc3[:, 0])  # plain causal: the user sees only itself


def test_padding_keys_are_ignored() -> None:
    torch.manual_seed(0)
    model = PETER(PETERConfig(**TINY), 2, 2, 12).eval()
    u, i = torch.tensor([0]), torch.tensor([1])
    a = model.encode(u, i, None, torch.tensor([[BOS_ID, 5, EOS_ID]]))
    b = model.encode(u, i, None, torch.tensor([[BOS_ID, 5, EOS_ID, PAD_ID, PAD_ID]]))
    torch.testing.assert_close(a, b[:, :5])


def test_peter_plus_puts_the_feature_after_the_ids() -> None:
    model = PETER(PETERConfig(**TINY, use_feature=True), 2, 2, 12).eval()
    h = model.encode(torch.tensor([0]), torch.tensor([1]), torch.tensor([7]), torch.tensor([[BOS_ID, 4]]))
    assert h.shape == (1, 5, 16) and model.src_len == 3
    with pytest.raises(ValueError, match="feature"):
        model.encode(torch.tensor([0]), torch.tensor([1]), None, torch.tensor([[BOS_ID]]))


def _batch() -> dict[str, torch.Tensor]:
    return {
        "user": torch.tensor([0, 1]),
        "item": torch.tensor([1, 2]),
        "feature": torch.tensor([4, 5]),
        "rating": torch.tensor([5.0, 2.0]),
        "text": torch.tensor([[BOS_ID, 4, 5, EOS_ID, PAD_ID], [BOS_ID, 6, EOS_ID, PAD_ID, PAD_ID]]),
        "context": torch.tensor([[4, 5, PAD_ID], [6, PAD_ID, PAD_ID]]),
    }


def test_losses_match_their_definitions() -> None:
    torch.manual_seed(0)
    cfg = PETERConfig(**TINY, text_weight=1.0, context_weight=0.5, rating_weight=0.1)
    model = PETER(cfg, 2, 3, 10).eval()
    b = _batch()
    parts = model.losses(b)
    h = model.encode(b["user"], b["item"], None, b["text"][:, :-1])
    rating = model.rating_mlp(h[:, 0]).squeeze(-1)
    context = torch.log_softmax(model.hidden2token(h[:, 1]), -1)
    words = torch.log_softmax(model.hidden2token(h[:, model.src_len :]), -1)
    want_t = (
        -(words[0, 0, 4] + words[0, 1, 5] + words[0, 2, EOS_ID] + words[1, 0, 6] + words[1, 1, EOS_ID]) / 5
    )
    want_c = -(context[0, 4] + context[0, 5] + context[1, 6]) / 3
    torch.testing.assert_close(parts["text"], want_t)
    torch.testing.assert_close(parts["context"], want_c)
    torch.testing.assert_close(parts["rating"], ((rating - b["rating"]) ** 2).mean())
    torch.testing.assert_close(model.loss(b), want_t + 0.5 * want_c + 0.1 * parts["rating"])


def test_registered_as_explain_task() -> None:
    spec = get_spec("peter")
    assert (
        spec.task == "explain"
        and "peter" in list_models("explain")
        and "peter" not in list_models("sequential")
    )
    assert spec.presets["paper"]["train"]["lr"] == 1.0 and spec.presets["plus"]["model"]["use_feature"]


def _toy_data(n: int = 160, numbered: bool = False):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    phrases = {
        "strings": "these strings sound bright and clear",
        "tuner": "the tuner is accurate and fast",
        "strap": "the strap is comfortable",
    }
    recs = []
    for _ in range(n):
        item = int(rng.integers(6))
        feat = list(phrases)[item % 3]
        recs.append(
            {
                "user": f"u{rng.integers(10)}",
                "item": item + 1 if numbered else f"i{item}",
                "rating": float(3 + item % 3),
                "template": (feat, "good", phrases[feat], 1),
            }
        )
    return from_records(recs)


def test_explainer_fit_explain_evaluate_and_save_load_identity(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    data = _toy_data()
    split = random_split(data, seed=0)
    ex = Explainer(
        config=TINY | {"use_feature": True, "max_words": 8},
        train={"optimizer": "adam", "lr": 0.01, "max_epochs": 12, "threads": 1},
        preset="plus",
    )
    ex.fit(data, split, progress=False)
    assert ex.train_result_ is not None and ex.train_result_.epochs >= 1
    metrics = ex.evaluate(data, split.test)
    assert {"RMSE", "MAE", "BLEU-1", "BLEU-4", "ROUGE-L-F", "USR", "FMR", "FCR", "DIV"} <= set(metrics)
    assert metrics["FMR"] > 0.5  # the feature is in the learned sentences
    out = ex.explain("u1", "i0")
    assert out["feature"] == "strings" and 1.0 <= out["rating"] <= 5.0 and out["text"]
    assert len(out["context_words"]) == 10
    ex.save(tmp_path / "m")
    back = Explainer.load(tmp_path / "m", device="cpu")
    for k, v in ex.core.state_dict().items():
        torch.testing.assert_close(back.core.state_dict()[k], v)
    assert back.explain("u1", "i0", feature="tuner") == ex.explain("u1", "i0", feature="tuner")
    beam3 = ex.decoding.but(beam=3)
    assert back.explain("u1", "i0", decoding=beam3) == ex.explain("u1", "i0", decoding=beam3)
    np.testing.assert_allclose(back.predict(data, split.test)[0], ex.predict(data, split.test)[0])
    assert back.evaluate(data, split.test) == metrics
    with pytest.raises(DataError, match="unknown user"):
        back.explain("nobody", "i0")
    with pytest.raises(ValueError, match="item must be an ID \\(text or a number\\), not list"):
        back.explain("u1", ["i0"])  # was "unknown item ['i0']"
    with pytest.raises(ValueError, match="user must be an ID .*, not NoneType None"):
        back.explain(None, "i0")
    # the default decoding blocks repeated trigrams; the paper's plain decoding stays one named value away
    assert ex.decoding == back.decoding == Decoding(1, 8, DECODINGS["blocked"]) and DECODINGS["paper"] == 0
    assert ex.evaluations_[0]["no_repeat_ngram"] == 3
    assert (
        ex.predict(data, split.test)[1]
        == ex.predict(data, split.test, decoding=Decoding(no_repeat_ngram=3))[1]
    )
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    del cfg["decode"]["no_repeat_ngram"]  # a directory saved before n-gram blocking (and before manifests)
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "m" / MANIFEST).unlink()
    assert Explainer.load(tmp_path / "m", device="cpu", allow_unsigned=True).decoding.no_repeat_ngram == 3


def test_rating_head_can_start_at_the_training_mean() -> None:
    model = PETER(PETERConfig(**TINY), 2, 2, 12).eval()
    model.init_rating(4.2)
    rating, context = model.predict(torch.tensor([0, 1]), torch.tensor([1, 2]))
    assert torch.allclose(rating, torch.full((2,), 4.2), atol=1.0) and context.shape == (2, 12)


def test_damped_offsets_match_hand_computation() -> None:
    # ratings: u0 rates i1=5, i2=3; u1 rates i1=4.  mu = 4.
    user, item, rating = np.array([0, 0, 1]), np.array([1, 2, 1]), np.array([5.0, 3.0, 4.0])
    mu, b_u, b_i = damped_offsets(user, item, rating, n_users=2, n_items=2, damping=1.0)
    assert mu == 4.0
    # b_i1 = (1 + 0) / (1 + 2) = 1/3; b_i2 = -1 / (1 + 1) = -1/2; padding row 0 stays 0
    np.testing.assert_allclose(b_i, [0.0, 1 / 3, -0.5])
    # b_u0 = ((5-4-1/3) + (3-4+1/2)) / (1 + 2) = (2/3 - 1/2) / 3; b_u1 = (4-4-1/3) / 2
    np.testing.assert_allclose(b_u, [(2 / 3 - 0.5) / 3, -1 / 6])


def test_rating_baseline_adds_the_fixed_offsets() -> None:
    torch.manual_seed(0)
    plain = PETER(PETERConfig(**TINY), 2, 2, 12).eval()
    based = PETER(PETERConfig(**TINY, rating_baseline=True), 2, 2, 12).eval()
    based.load_state_dict(plain.state_dict() | {"user_offset": torch.zeros(2), "item_offset": torch.zeros(3)})
    based.init_rating(4.0, np.array([0.5, -0.25]), np.array([0.0, 0.1, -0.2]))
    plain.init_rating(4.0)
    u, i = torch.tensor([0, 1]), torch.tensor([2, 1])
    torch.testing.assert_close(
        based.predict(u, i)[0], plain.predict(u, i)[0] + torch.tensor([0.5 - 0.2, -0.25 + 0.1])
    )
    assert "user_offset" in based.state_dict() and "user_offset" not in plain.state_dict()
    assert not any(p is based.user_offset for p in based.parameters())  # fixed, never trained


def test_own_rating_checkpoint_is_the_best_validation_rating(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    data = _toy_data()
    split = random_split(data, seed=0)
    ex = Explainer(
        config=TINY
        | {"max_words": 8, "rating_checkpoint": "own", "rating_baseline": True, "rating_weight": 1.0},
        train={"optimizer": "adam", "lr": 0.03, "max_epochs": 8, "threads": 1},
        preset="adam",
    )
    ex.fit(data, split, progress=False)
    assert ex.rating_core_ is not None and ex.rating_baseline_ is not None
    assert ex.rating_baseline_["damping"] in DAMPINGS
    history = [h["valid"]["rating"] for h in ex.train_result_.history if "valid" in h]
    u, i = (
        torch.from_numpy(np.array(data.user[split.valid])),
        torch.from_numpy(np.array(data.item[split.valid])),
    )
    enc_valid = encode_reviews(data.take(split.valid), ex.vocab_, ex.config.max_words)
    with torch.no_grad():
        assert ex._mean_losses(ex.rating_core_, enc_valid)["rating"] == pytest.approx(min(history), rel=1e-5)
        want = ex.rating_core_.predict(u, i)[0].numpy()
    # predictions use the rating copy; text comes from the jointly selected weights
    pred, _ = ex.predict(data, split.valid)
    np.testing.assert_allclose(pred, want, rtol=1e-6)
    ex.save(tmp_path / "m")
    assert (tmp_path / "m" / "rating_weights.safetensors").exists()
    back = Explainer.load(tmp_path / "m", device="cpu")
    np.testing.assert_allclose(back.predict(data, split.test)[0], ex.predict(data, split.test)[0])
    assert back.explain("u1", "i0") == ex.explain("u1", "i0") and back.rating_baseline_ == ex.rating_baseline_


def test_own_rating_snapshot_survives_a_resume(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    data = _toy_data()
    split = random_split(data, seed=0)
    cfg = TINY | {"max_words": 8, "rating_checkpoint": "own", "rating_weight": 1.0}
    full = Explainer(
        config=cfg, train={"optimizer": "adam", "lr": 0.03, "max_epochs": 4, "threads": 1}, preset="adam"
    )
    full.fit(data, split, progress=False)
    ratings = [h["valid"]["rating"] for h in full.train_result_.history if "valid" in h]
    assert ratings.index(min(ratings)) < 2  # the snapshot to keep is taken before the interruption
    part = Explainer(
        config=cfg, train={"optimizer": "adam", "lr": 0.03, "max_epochs": 2, "threads": 1}, preset="adam"
    )
    part.fit(data, split, state_dir=tmp_path / "state", progress=False)
    rest = Explainer(
        config=cfg, train={"optimizer": "adam", "lr": 0.03, "max_epochs": 4, "threads": 1}, preset="adam"
    )
    rest.fit(data, split, state_dir=tmp_path / "state", progress=False)
    for k, v in full.rating_core_.state_dict().items():
        torch.testing.assert_close(rest.rating_core_.state_dict()[k], v)


def test_rating_checkpoint_must_be_known() -> None:
    with pytest.raises(ValueError, match="rating_checkpoint"):
        PETERConfig(rating_checkpoint="best")


def test_peter_plus_finds_an_items_feature_whatever_number_type_names_it() -> None:
    """``explain(user, 1.0)`` of a log with item 1 found the item but looked its feature up under "1.0":
    PETER+ then talked about no feature, without a word."""
    data = _toy_data(60, numbered=True)
    ex = Explainer(
        config=TINY | {"use_feature": True, "max_words": 6}, train={"max_epochs": 1}, preset="plus"
    )
    ex.fit(data, random_split(data, seed=0), progress=False)
    by_text = ex.explain("u1", "1")
    assert by_text["feature"] is not None
    assert ex.explain("u1", 1.0)["feature"] == ex.explain("u1", 1)["feature"] == by_text["feature"]
