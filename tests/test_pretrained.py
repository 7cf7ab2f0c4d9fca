"""Pretrained weights: the real packaged MiniLM checked against transformers, GPT-2 layout, errors,
text windows."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from collapse import corpus, masks, pretrained, san
from collapse.checks import ParameterError

transformers = pytest.importorskip(
    "transformers"
)  # a test-only dependency: the reference implementation


@pytest.fixture(scope="module")
def minilm():
    return pretrained.load()


@pytest.fixture(scope="module")
def reference(minilm):
    """transformers' BertModel on the same weights, float64, eval mode (no dropout)."""
    config = transformers.BertConfig.from_json_file(str(minilm.path / "config.json"))
    model = transformers.BertModel(config, add_pooling_layer=False).double().eval()
    state = {
        k: v.double() if v.is_floating_point() else v
        for k, v in load_file(str(minilm.path / "model.safetensors")).items()
    }
    assert not model.load_state_dict(state, strict=False).missing_keys
    return model


@pytest.fixture(scope="module")
def ids(minilm):
    return corpus.token_windows(minilm, corpus.load_text(), 3, 64, seed=1)


def test_default_model_is_the_packaged_minilm(minilm):
    assert minilm.family == "bert" and "all-MiniLM-L6-v2" in minilm.name
    c = minilm.config
    assert (c.d, c.n_layers, c.n_heads, c.d_ff, c.ln_eps, c.variant) == (
        384,
        6,
        12,
        1536,
        1e-12,
        "full",
    )
    assert len(minilm.layers) == 6 and minilm.max_positions == 512


def test_attention_block_equals_transformers(minilm, reference, ids):
    X = minilm.embed(ids)
    with torch.no_grad():
        torch.testing.assert_close(X, reference.embeddings(input_ids=ids), rtol=0, atol=1e-12)
        for i, layer in enumerate(reference.encoder.layer):
            expected = layer.attention.output.dense(layer.attention.self(X)[0])
            ours, _ = san.self_attention(X, minilm.layers[i], minilm.config)
            torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)
            assert (
                ours - expected
            ).abs().max() < 1e-12  # float64 on both sides: far tighter than the 1e-5 asked for


def test_full_model_equals_transformers(minilm, reference, ids):
    with torch.no_grad():
        expected = reference(input_ids=ids, output_hidden_states=True).hidden_states
    run = minilm.simulate(minilm.embed(ids), "full", metrics=("mu",))
    torch.testing.assert_close(run.final, expected[-1], rtol=0, atol=1e-10)
    layer_mu = torch.stack(
        [torch.linalg.vector_norm(h - h.mean(-2, keepdim=True), dim=(-2, -1)) for h in expected]
    )
    torch.testing.assert_close(run["mu"], layer_mu, rtol=1e-10, atol=0)


def test_variants_use_each_layers_own_weights(minilm, ids):
    X = minilm.embed(ids)
    w = minilm.layers[0]
    attention_only = san.simulate(
        X, san.SANConfig.bert(variant="attention", n_layers=1, d=384, d_ff=1536), weights=[w]
    ).final
    torch.testing.assert_close(
        minilm.simulate(X, "attention").final, minilm.simulate(X, "attention").final
    )
    sa, _ = san.self_attention(X, w, minilm.config)
    torch.testing.assert_close(attention_only, sa)
    skip_ln = san.simulate(X, minilm.variant("skip_ln"), weights=[w]).final
    torch.testing.assert_close(
        skip_ln, torch.nn.functional.layer_norm(X + sa, (384,), w.ln1_weight, w.ln1_bias, 1e-12)
    )


def test_masks_and_temperature_reach_every_layer(minilm, ids):
    X = minilm.embed(ids)
    mask = masks.make("causal", X.shape[-2])
    full, causal = minilm.simulate(X, "full"), minilm.simulate(X, "full", mask=mask)
    assert not torch.allclose(full.final, causal.final)
    torch.testing.assert_close(
        causal.final[:, 0], minilm.simulate(X[:, :1], "full").final[:, 0]
    )  # token 0 sees only itself
    hot = minilm.simulate(X, "attention", d_qk=64.0, metrics=("mu",))
    cold = minilm.simulate(X, "attention", d_qk=1 / 64, metrics=("mu",))
    assert torch.all(
        hot["mu"][1] < cold["mu"][1]
    )  # larger d_QK, more uniform attention, more collapse


def tiny_gpt2(path):
    """A random 2-layer GPT-2 saved in the Hugging Face layout, with a byte-level BPE tokenizer."""
    from tokenizers.implementations import ByteLevelBPETokenizer

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=300
    )
    model = transformers.GPT2Model(config).eval()
    model.save_pretrained(str(path), safe_serialization=True)
    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(
        [corpus.load_text().text[:20000]], vocab_size=300, show_progress=False
    )
    tokenizer.save_model(str(path))
    return model


def test_gpt2_checkpoint_equals_transformers(tmp_path):
    reference = tiny_gpt2(tmp_path)
    model = pretrained.load(tmp_path)
    assert (
        model.family == "gpt2" and model.config.pre_ln and model.config.activation == "gelu_tanh"
    )
    ids = corpus.token_windows(model, corpus.load_text(), 2, 48, seed=0)
    assert ids.shape == (2, 48)
    with torch.no_grad():
        expected = reference.double()(input_ids=ids).last_hidden_state
    run = model.simulate(model.embed(ids), "full", mask=masks.make("causal", 48))
    weight, bias = model.final_norm
    ours = torch.nn.functional.layer_norm(run.final, (32,), weight, bias, model.config.ln_eps)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-10)


def test_windows_are_exact_seeded_and_distinct(minilm):
    text = corpus.load_text()
    a = corpus.token_windows(minilm, text, 20, 128, seed=3)
    assert a.shape == (20, 128) and torch.all(a[:, 0] == 101) and torch.all(a[:, -1] == 102)
    assert torch.equal(a, corpus.token_windows(minilm, text, 20, 128, seed=3))
    assert not torch.equal(a, corpus.token_windows(minilm, text, 20, 128, seed=4))
    assert len({tuple(row.tolist()) for row in a}) == 20
    assert text.licence == "PSF-2.0" and text.words > 50000 and len(text.sha256) == 64


def write_minilm_copy(source, target, *, config=None, weights: bytes | None = None):
    target.mkdir()
    for name in ("tokenizer.json", "config.json"):
        (target / name).write_bytes((source / name).read_bytes())
    if config is not None:
        (target / "config.json").write_text(json.dumps(config))
    if weights is not None:
        (target / "model.safetensors").write_bytes(weights)
    return target


def test_bad_checkpoints_give_one_clear_line(minilm, tmp_path):
    with pytest.raises(ParameterError, match="model directory .* does not exist"):
        pretrained.load(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ParameterError, match="has no config.json"):
        pretrained.load(empty)
    with pytest.raises(ParameterError, match="has no model.safetensors"):
        pretrained.load(write_minilm_copy(minilm.path, tmp_path / "no-weights"))
    full = (minilm.path / "model.safetensors").read_bytes()
    with pytest.raises(ParameterError, match="model.safetensors is corrupt or truncated"):
        pretrained.load(
            write_minilm_copy(minilm.path, tmp_path / "truncated", weights=full[: len(full) // 2])
        )
    with pytest.raises(ParameterError, match="model.safetensors is corrupt or truncated"):
        pretrained.load(write_minilm_copy(minilm.path, tmp_path / "garbage", weights=b"\x00" * 64))
    t5 = json.loads((minilm.path / "config.json").read_text()) | {"model_type": "t5"}
    with pytest.raises(ParameterError, match="model_type must be one of bert, gpt2 .*; got 't5'"):
        pretrained.load(write_minilm_copy(minilm.path, tmp_path / "t5", config=t5, weights=full))
    partial = tmp_path / "partial.safetensors"
    save_file({"embeddings.word_embeddings.weight": torch.zeros(4, 384)}, str(partial))
    with pytest.raises(
        ParameterError, match="lacks tensor 'embeddings.position_embeddings.weight'"
    ):
        pretrained.load(
            write_minilm_copy(minilm.path, tmp_path / "partial", weights=partial.read_bytes())
        )
    with pytest.raises(
        ParameterError, match="model package 'no_such_model_package' is not installed"
    ):
        pretrained.load("no_such_model_package")


def test_bad_text_inputs_give_one_clear_line(minilm, tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("Only a few words of English here.")
    with pytest.raises(
        ParameterError,
        match=r"corpus too small: .* has \d+ tokens, 0 distinct windows of 126; asked for 2",
    ):
        corpus.token_windows(minilm, corpus.load_text(tiny), 2, 128)
    with pytest.raises(
        ParameterError, match="corpus must be 'default', 'wikipedia' or an existing text file"
    ):
        corpus.load_text(tmp_path / "missing.txt")
    with pytest.raises(ParameterError, match="n_tokens must be at most 512"):
        corpus.token_windows(minilm, corpus.load_text(), 2, 600)
    with pytest.raises(ParameterError, match="variant must be one of"):
        minilm.variant("pre_ln")
    assert math.isfinite(
        minilm.simulate(
            minilm.embed(corpus.token_windows(minilm, corpus.load_text(tiny), 1, 9)), "full"
        )["mu"][-1].item()
    )


def write_bert_checkpoint(source, target, *, config=None):
    """The packaged MiniLM rewritten the way a downloaded bert-base-uncased comes: pickled
    pytorch_model.bin with "bert." keys and gamma/beta LayerNorm names, an MLM head tensor,
    vocab.txt without tokenizer.json, no _name_or_path."""
    target.mkdir(parents=True)
    renamed = {}
    for key, value in load_file(str(source / "model.safetensors")).items():
        if ".LayerNorm." in key:
            key = key.replace(".weight", ".gamma").replace(".bias", ".beta")
        renamed["bert." + key] = value
    renamed["cls.predictions.bias"] = torch.zeros(30522)
    torch.save(renamed, target / "pytorch_model.bin")
    cfg = json.loads((source / "config.json").read_text())
    cfg.pop("_name_or_path")
    (target / "config.json").write_text(json.dumps(cfg | (config or {})))
    (target / "vocab.txt").write_bytes((source / "vocab.txt").read_bytes())
    (target / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return target


def test_checkpoint_directory_loads_like_the_package(minilm, ids, tmp_path):
    folder = write_bert_checkpoint(minilm.path, tmp_path / "bert-like")
    model = pretrained.load_checkpoint(str(folder))
    assert model.name == "bert-like" and model.family == "bert" and model.config == minilm.config
    text = corpus.load_text()
    assert torch.equal(  # WordPiece from vocab.txt = the packaged tokenizer.json
        corpus.token_windows(model, text, 3, 64, seed=1), ids
    )
    X = model.embed(ids)
    torch.testing.assert_close(X, minilm.embed(ids), rtol=0, atol=0)
    torch.testing.assert_close(
        model.simulate(X, "full").final, minilm.simulate(X, "full").final, rtol=0, atol=0
    )
    # safetensors in a Hugging Face cache snapshot: the name comes from the cache folder
    snapshot = tmp_path / "models--google-bert--bert-base-uncased" / "snapshots" / "abc123"
    snapshot.parent.mkdir(parents=True)
    write_minilm_copy(
        minilm.path, snapshot, weights=(minilm.path / "model.safetensors").read_bytes()
    )
    config = json.loads((snapshot / "config.json").read_text())
    config.pop("_name_or_path")
    (snapshot / "config.json").write_text(json.dumps(config))
    assert pretrained.load_checkpoint(snapshot).name == "google-bert/bert-base-uncased"


def test_bad_checkpoint_parameter_gives_one_line_naming_it(minilm, tmp_path):
    for value in (None, "", 3):
        with pytest.raises(ParameterError, match="parameter checkpoint must be the path"):
            pretrained.load_checkpoint(value)
    with pytest.raises(ParameterError, match="parameter checkpoint: .* is not a directory"):
        pretrained.load_checkpoint(tmp_path / "bert-base-uncased")
    (tmp_path / "file.txt").write_text("not a folder")
    with pytest.raises(ParameterError, match="parameter checkpoint: .* is not a directory"):
        pretrained.load_checkpoint(tmp_path / "file.txt")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ParameterError, match="parameter checkpoint: .* has no config.json"):
        pretrained.load_checkpoint(empty)
    cases = {
        "no-heads": ({"num_attention_heads": None}, "num_attention_heads must be"),
        "too-wide": ({"hidden_size": 768}, "config.json implies width 768"),
        "relative": ({"position_embedding_type": "relative_key"}, "absolute positions"),
    }
    for name, (config, message) in cases.items():
        folder = write_bert_checkpoint(minilm.path, tmp_path / name, config=config)
        with pytest.raises(ParameterError, match=f"parameter checkpoint: .*{message}") as err:
            pretrained.load_checkpoint(folder, parameter="checkpoint")
        assert "\n" not in str(err.value)
    broken = write_bert_checkpoint(minilm.path, tmp_path / "broken")
    (broken / "pytorch_model.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(ParameterError, match="pytorch_model.bin is corrupt or truncated") as err:
        pretrained.load_checkpoint(broken)
    assert "\n" not in str(err.value)
    tiny_gpt2(tmp_path / "gpt2")
    with pytest.raises(ParameterError, match="holds a gpt2 checkpoint; .* needs the bert family"):
        pretrained.load_checkpoint(tmp_path / "gpt2")
    assert pretrained.load_checkpoint(tmp_path / "gpt2", family=None).family == "gpt2"
