"""The training curve stored as a training log and a dev curve: no plotted column has an
empty cell that stands for "not measured at this step" (a plot reads it as 0)."""

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from kedro.io import DatasetError

from contrastive_sentence_embeddings.pipelines.datasets import TrainingCurveDataset
from contrastive_sentence_embeddings.training.curves import join_curve, split_curve
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, tokenize_sentences, train
from tests.helpers import wiki_sentences


def merged_curve(seed=None):
    """The trainer's table for 42 steps, loss logged every 10 steps and at the end,
    dev sets scored every 14 (DeCLUTR's committed run has this shape)."""
    evaluated = {0: 83.26, 14: 83.05, 28: 82.99, 42: 83.08}
    logged = {10: 11.94, 20: 8.07, 30: 7.70, 40: 7.52, 42: 7.38}
    rows = []
    for step in sorted(set(evaluated) | set(logged)):
        row = {"step": step}
        if step in evaluated:
            row |= {"dev/stsb_dev": evaluated[step] + 3, "dev/sickr_dev": evaluated[step] - 3,
                    "dev/dev_avg": evaluated[step]}
        if step in logged:
            row |= {"epoch": step // 15, "lr": 1e-5, "loss": logged[step], "nt_xent": logged[step] / 10}
        rows.append(row)
    table = pd.DataFrame(rows)
    if seed is not None:
        table.insert(0, "seed", seed)
    return table


def test_the_dev_curve_holds_the_evaluated_steps_only_and_the_log_the_logged_ones():
    training_log, dev_curve = split_curve(merged_curve(seed=42))
    assert dev_curve["step"].tolist() == [0, 14, 28, 42]
    assert list(dev_curve.columns) == ["seed", "step", "dev/stsb_dev", "dev/sickr_dev", "dev/dev_avg"]
    assert dev_curve["dev/dev_avg"].tolist() == [83.26, 83.05, 82.99, 83.08]
    assert training_log["step"].tolist() == [10, 20, 30, 40, 42]
    assert list(training_log.columns) == ["seed", "step", "epoch", "lr", "loss", "nt_xent"]
    assert training_log["loss"].tolist() == [11.94, 8.07, 7.70, 7.52, 7.38]
    assert not dev_curve.isna().any().any() and not training_log.isna().any().any()


def test_joining_the_two_gives_the_trainers_table_back():
    for seed in (None, 7):
        curve = merged_curve(seed)
        pd.testing.assert_frame_equal(join_curve(*split_curve(curve)), curve, check_dtype=False)


def test_the_runs_of_several_seeds_keep_their_own_rows():
    curve = pd.concat([merged_curve(seed=43), merged_curve(seed=42)], ignore_index=True)
    training_log, dev_curve = split_curve(curve)
    assert dev_curve[["seed", "step"]].values.tolist() == [[s, t] for s in (42, 43) for t in (0, 14, 28, 42)]
    assert len(training_log) == 10 and not training_log.isna().any().any()


def test_a_run_without_dev_scores_has_an_empty_dev_curve():
    training_log, dev_curve = split_curve(merged_curve().drop(columns=["dev/stsb_dev", "dev/sickr_dev", "dev/dev_avg"]))
    assert dev_curve.empty and list(dev_curve.columns) == ["step"]
    assert training_log["step"].tolist() == [10, 20, 30, 40, 42]


def test_a_table_without_steps_is_refused():
    with pytest.raises(ValueError, match="needs a 'step' column; it has loss"):
        split_curve(pd.DataFrame({"loss": [1.0]}))


def test_the_dataset_writes_both_files_and_names_a_missing_one(tmp_path):
    dataset = TrainingCurveDataset(str(tmp_path / "training_curves/m.csv"), str(tmp_path / "dev_curves/m.csv"))
    dataset.save(merged_curve(seed=42))
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["m.csv", "m.csv"]  # no temporary left
    # As a plot reads the files: every cell of both has a value.
    for path in (tmp_path / "training_curves/m.csv", tmp_path / "dev_curves/m.csv"):
        assert "" not in [cell for line in path.read_text().splitlines() for cell in line.split(",")], path
    pd.testing.assert_frame_equal(dataset.load(), merged_curve(seed=42), check_dtype=False)
    (tmp_path / "dev_curves/m.csv").unlink()
    with pytest.raises(DatasetError, match=r"dev_curves/m\.csv missing"):
        dataset.load()


class ConstantDevScorer:
    def __call__(self, encode):
        return {"stsb_dev": 80.0, "sickr_dev": 70.0, "dev_avg": 75.0}


def test_a_real_runs_dev_curve_has_no_row_where_no_evaluation_ran(tiny_bert, tokenizer, mirror_dir, tmp_path):
    """Loss logged every 2 steps, dev sets scored every 3: the saved dev curve has the
    rows of steps 0, 3, 6 and no other; the training log those of steps 2, 4, 6."""
    lines = wiki_sentences(mirror_dir, limit=200)
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
    config = TrainingConfig(batch_size=16, learning_rate=1e-4, device="cpu", log_every=2, eval_every=3, max_steps=6)
    result = train(model, tokenizer, tokenize_sentences(tokenizer, lines, 32), config, ConstantDevScorer())
    assert result.curve["step"].tolist() == [0, 2, 3, 4, 6]  # the trainer's merged table

    dataset = TrainingCurveDataset(str(tmp_path / "training.csv"), str(tmp_path / "dev.csv"))
    dataset.save(result.curve)
    dev_curve, training_log = pd.read_csv(tmp_path / "dev.csv"), pd.read_csv(tmp_path / "training.csv")
    assert dev_curve["step"].tolist() == [0, 3, 6]
    assert dev_curve["dev/dev_avg"].tolist() == [75.0, 75.0, 75.0]
    assert training_log["step"].tolist() == [2, 4, 6]
    assert np.isfinite(training_log["loss"]).all() and "dev/dev_avg" not in training_log
    assert not dev_curve.isna().any().any() and not training_log.isna().any().any()
    pd.testing.assert_frame_equal(dataset.load(), result.curve, check_dtype=False, check_like=True)


# --- what the charts draw ---------------------------------------------------------------
def test_the_dev_curve_carries_the_selection_score_and_rings_the_kept_step():
    """The committed DeCLUTR run kept step 42 by STS-B dev while dev_avg fell below step
    0's: the chart's column is the score the run selects by, and the kept step is marked."""
    from contrastive_sentence_embeddings.training.curves import KEPT, SELECTION, with_selection

    curve = with_selection(merged_curve(seed=42), "stsb_dev", kept_step=42)
    _, dev_curve = split_curve(curve)
    assert dev_curve[SELECTION].tolist() == dev_curve["dev/stsb_dev"].tolist()
    assert dev_curve[KEPT].tolist() == [0.0, 0.0, 0.0, 1.0]
    training_log, _ = split_curve(curve)
    assert SELECTION not in training_log and KEPT not in training_log
    assert with_selection(merged_curve(), "dev_avg", 0)[SELECTION].dropna().tolist() == [83.26, 83.05, 82.99, 83.08]
    with pytest.raises(ValueError, match="no dev/sickr_trial column"):
        with_selection(merged_curve(), "sickr_trial", 0)
    # A run scored by no dev scorer (a fan-out's other ranks): nothing to mark, nothing added.
    unscored = merged_curve().filter(regex=r"^(?!dev/)")
    pd.testing.assert_frame_equal(with_selection(unscored, "stsb_dev", 0), unscored)


def test_the_loss_chart_file_has_each_term_in_long_form(tmp_path):
    from contrastive_sentence_embeddings.training.curves import loss_terms

    curve = pd.concat([merged_curve(seed=42), merged_curve(seed=43)])
    training_log, _ = split_curve(curve)
    long = loss_terms(training_log)
    assert list(long.columns) == ["seed", "step", "term", "value"]
    assert long["term"].unique().tolist() == ["loss", "nt_xent"]  # the sum first; lr and epoch are no loss
    assert len(long) == 2 * 2 * 5  # two terms, two seeds, five logged steps
    nt_xent = long[(long["term"] == "nt_xent") & (long["seed"] == 43)]
    assert nt_xent["step"].tolist() == [10, 20, 30, 40, 42] and nt_xent["value"].tolist()[0] == pytest.approx(1.194)
    dataset = TrainingCurveDataset(str(tmp_path / "log.csv"), str(tmp_path / "dev.csv"), str(tmp_path / "terms.csv"))
    dataset.save(curve)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "terms.csv"), long, check_dtype=False)
