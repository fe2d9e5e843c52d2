import json
import math

import numpy as np
import pandas as pd
import pytest

from contrastive_sentence_embeddings.evaluation import leaderboard
from tests.helpers import PROJECT_ROOT


def metrics(name, method, pooling, sts_avg, seed=None, **extra):
    return {"model": {"name": name, "method": method, "base_encoder": "bert-base-uncased", "pooling": pooling,
                      "seed": seed}, "sts_avg": sts_avg, **extra}


def test_table_orders_baselines_first_then_methods_by_score():
    table = leaderboard.metrics_table({
        "simcse-b": metrics("simcse-b", "simcse", "cls_before_pooler", 70.0, seed=2),
        "baseline-mean": metrics("baseline-mean", "baseline", "mean", 50.0),
        "simcse-a": metrics("simcse-a", "simcse", "cls_before_pooler", 75.0, seed=1, MR=80.5),
    })
    assert table["model"].tolist() == ["baseline-mean", "simcse-a", "simcse-b"]
    assert table.loc[1, "MR"] == 80.5 and math.isnan(table.loc[2, "MR"])
    assert table["seed"].tolist()[1:] == [1, 2] and table["seed"].isna().tolist()[0]


def test_paper_reference_only_where_method_encoder_and_pooling_match():
    table = leaderboard.metrics_table({
        "ours": metrics("ours", "simcse", "cls_before_pooler", 70.0),
        "other-pooling": metrics("other-pooling", "simcse", "mean", 70.0),
    })
    reported = [{"method": "simcse", "base_encoder": "bert-base-uncased", "pooling": "cls_before_pooler",
                 "setting": "all", "sts": {"sts_avg": 76.25}},
                {"method": "simcse", "base_encoder": "bert-base-uncased", "pooling": "cls_before_pooler",
                 "setting": "wmean", "sts": {"sts_avg": 76.46}}]
    with_paper = leaderboard.add_paper_reference(table, reported).set_index("model")
    assert with_paper.loc["ours", "paper_sts_avg"] == 76.25  # the "all" setting, not wmean
    assert math.isnan(with_paper.loc["other-pooling", "paper_sts_avg"])


def test_markdown_leaves_missing_values_empty_and_drops_empty_columns():
    table = pd.DataFrame({"model": ["a", "b"], "sts12": [70.123, float("nan")], "MR": [float("nan")] * 2})
    text = leaderboard.markdown_table(table, ["model", "sts12", "MR"])
    assert text.splitlines() == ["| model | STS12 |", "|---|---:|", "| a | 70.12 |", "| b |  |"]


def test_shipped_reported_results_are_consistent():
    """Each paper row's average is the mean of its seven tasks (a transcription check)."""
    for entry in leaderboard.load_reported_results():
        sts = entry["sts"]
        tasks = [sts[t] for t in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")]
        assert sum(tasks) / 7 == pytest.approx(sts["sts_avg"], abs=0.006), entry["source"]
        assert entry["source"] and entry["url"].startswith("https://")


def test_figure_has_one_point_per_model_with_geometry():
    table = leaderboard.metrics_table({
        "a": metrics("a", "baseline", "mean", 70.0, alignment=0.2, uniformity=-3.0),
        "b": metrics("b", "baseline", "last_avg", 70.0, alignment=0.2, uniformity=-3.0),
        "c": metrics("c", "simcse", "cls", 60.0),
    })
    figure = leaderboard.alignment_uniformity_figure(table)
    axis = figure.axes[0]
    assert len(axis.collections[0].get_offsets()) == 2
    # Identical points share a number; the legend beside the axes names them.
    assert [t.get_text() for t in axis.texts] == ["1", "1  a = b"]


# --- uncertainty ------------------------------------------------------------------------
def pair_predictions(rng, gold, noise):
    """A model's per-pair predictions on every STS task: gold plus Gaussian noise."""
    return {task: {"gold": gold[task], "predicted": gold[task] + rng.normal(0, noise, len(gold[task])),
                   "subset": pd.Series(["all"] * len(gold[task])).to_numpy()} for task in gold}


@pytest.fixture
def seeded_runs():
    pairs = seeded_runs_pairs()
    rows = {
        "baseline-cls": metrics("baseline-cls", "baseline", "cls", 60.0, sts_avg_ci=[58.0, 62.0]),
        "simcse.seed1": metrics("simcse.seed1", "simcse", "cls", 80.0, seed=1,
                                training={"examples_seen": 640, "train_seconds": 10.0}),
        "simcse.seed2": metrics("simcse.seed2", "simcse", "cls", 78.0, seed=2,
                                training={"examples_seen": 640, "train_seconds": 12.0}),
        "scd": metrics("scd", "scd", "cls", 60.5, seed=1,
                       training={"examples_seen": 320, "train_seconds": 5.0, "best_step": 0}),
    }
    from contrastive_sentence_embeddings.evaluation.significance import summarise_seed_runs

    rows["simcse"] = summarise_seed_runs([rows["simcse.seed1"], rows["simcse.seed2"]])
    table = leaderboard.add_uncertainty(leaderboard.metrics_table(rows), rows)
    return leaderboard.add_significance(table, rows, pairs, n_resamples=200, seed=0), rows


def test_seed_summaries_show_mean_and_spread_and_the_budget(seeded_runs):
    table, _ = seeded_runs
    simcse = table.set_index("model").loc["simcse"]
    assert simcse["sts_avg"] == 79.0 and simcse["sts_avg_std"] == pytest.approx(2 ** 0.5)  # (80, 78), ddof 1
    assert simcse["n_seeds"] == 2 and simcse["examples_seen"] == 640 and simcse["train_seconds"] == 11.0
    view = leaderboard.uncertainty_view(table).set_index("model")
    assert view.loc["simcse", "sts_avg"] == "79.00 +- 1.41" and view.loc["scd", "sts_avg"] == "60.50"
    baseline = table.set_index("model").loc["baseline-cls"]
    assert (baseline["sts_avg_ci_lo"], baseline["sts_avg_ci_hi"]) == (58.0, 62.0)


def test_each_trained_row_is_tested_against_its_starting_encoder(seeded_runs):
    table, _ = seeded_runs
    rows = table.set_index("model")
    # Far less noise than the baseline: a real difference, for each seed.
    assert rows.loc["simcse.seed1", "p_vs_base"] < 0.05 and rows.loc["simcse", "significant"]
    assert rows.loc["simcse", "p_vs_base"] == max(rows.loc["simcse.seed1", "p_vs_base"],
                                                  rows.loc["simcse.seed2", "p_vs_base"])
    # The same noise as the baseline: no real difference.
    assert rows.loc["scd", "p_vs_base"] >= 0.05 and not rows.loc["scd", "significant"]
    assert math.isnan(rows.loc["baseline-cls", "p_vs_base"])
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]))
    assert "n.s." in next(line for line in markdown.splitlines() if line.startswith("| scd |"))
    assert "## Each seed's run" in markdown and "| simcse.seed1 |" in markdown


def test_a_seeded_row_has_a_95_percent_interval_over_its_seeds(seeded_runs):
    table, _ = seeded_runs
    rows = table.set_index("model")
    # two seeds (80, 78): mean 79, sd sqrt(2); t(0.975, 1) = 12.706 (tables): 79 -+ 12.706 * sqrt(2) / sqrt(2)
    assert rows.loc["simcse", "sts_avg_seed_ci_lo"] == pytest.approx(79 - 12.7062, abs=1e-3)
    assert rows.loc["simcse", "sts_avg_seed_ci_hi"] == pytest.approx(79 + 12.7062, abs=1e-3)
    assert math.isnan(rows.loc["scd", "sts_avg_seed_ci_lo"])  # one run: no spread over seeds to estimate
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]))
    assert "[66.29, 91.71]" in next(line for line in markdown.splitlines() if line.startswith("| simcse |"))


def test_any_row_is_tested_against_the_reference_seed_against_seed(seeded_runs):
    from contrastive_sentence_embeddings.evaluation.significance import paired_bootstrap_pvalue

    table, rows = seeded_runs
    pairs = seeded_runs_pairs()
    compared = leaderboard.add_reference_comparison(table, rows, pairs, "simcse", n_resamples=200, seed=0)
    by_model = compared.set_index("model")
    # scd (noise 2.0) against both SimCSE seeds (0.5, 0.6): worse for each, significantly
    tests = [paired_bootstrap_pvalue({t: pairs["scd"][t]["gold"] for t in pairs["scd"]},
                                     {t: pairs["scd"][t]["predicted"] for t in pairs["scd"]},
                                     {t: pairs[run][t]["predicted"] for t in pairs[run]}, n_resamples=200, seed=0)
             for run in ("simcse.seed1", "simcse.seed2")]
    assert by_model.loc["scd", "delta_vs_ref"] == pytest.approx(np.mean([test.difference for test in tests]))
    assert by_model.loc["scd", "p_vs_ref"] == max(test.p_value for test in tests) < 0.05
    assert by_model.loc["simcse", "vs_ref_note"] == "n/a (the reference)"
    # a seed of the reference is tested against every seed of it, itself included: never significant
    assert by_model.loc["simcse.seed1", "p_vs_ref"] == 1.0
    view = leaderboard.uncertainty_view(compared).set_index("model")
    assert view.loc["scd", "vs simcse"].startswith(f"{by_model.loc['scd', 'delta_vs_ref']:+.2f} (p ")
    markdown = leaderboard.leaderboard_markdown(compared, pd.DataFrame(columns=["method"]))
    header = next(line for line in markdown.splitlines() if line.startswith("| model |"))
    assert "| vs base | vs simcse |" in header
    # without a reference nothing is added
    assert leaderboard.add_reference_comparison(table, rows, pairs, None) is table


def seeded_runs_pairs():
    """The per-pair predictions of the ``seeded_runs`` fixture (the same draw every call)."""
    rng = np.random.default_rng(0)
    gold = {task: rng.uniform(0, 5, 300) for task in ("sts12", "stsb", "sickr")}
    return {"baseline-cls": pair_predictions(rng, gold, 2.0), "simcse.seed1": pair_predictions(rng, gold, 0.5),
            "simcse.seed2": pair_predictions(rng, gold, 0.6), "scd": pair_predictions(rng, gold, 2.0)}


def test_a_run_that_kept_its_starting_weights_says_so(seeded_runs):
    """CLSR on an encoder already trained for STS can keep step 0 (no step beats the
    start on dev): two such runs then score the same, and the table must say why."""
    table, _ = seeded_runs
    assert table.set_index("model").loc["scd", "best_step"] == 0
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]))
    header = next(line for line in markdown.splitlines() if line.startswith("| model |"))
    scd_row = next(line for line in markdown.splitlines() if line.startswith("| scd |"))
    kept = header.strip("|").split("|").index(" kept step ")
    assert scd_row.strip("|").split("|")[kept].strip() == "0"
    assert "0 means no training step beat the starting weights" in markdown


def test_an_equal_budget_keeps_the_baselines_and_the_runs_that_saw_it(seeded_runs):
    table, _ = seeded_runs
    assert set(leaderboard.within_budget(table, 320)["model"]) == {"baseline-cls", "scd"}
    assert len(leaderboard.within_budget(table, None)) == len(table)


def test_the_figure_shows_seeds_and_numbers_every_model(seeded_runs):
    table, _ = seeded_runs
    table = table.assign(alignment=[0.2, 0.3, 0.25, 0.31, 0.4], uniformity=[-2.0, -2.5, -2.4, -2.6, -1.0])
    figure = leaderboard.alignment_uniformity_figure(table)
    texts = [text.get_text() for text in figure.axes[0].texts]
    legend = next(text for text in texts if "\n" in text or "  " in text)
    for name in ("baseline-cls", "simcse", "scd"):
        assert name in legend
    assert "simcse.seed1" not in legend  # single seeds are the small points around their mean


# --- where each row comes from: current, stale, carried -----------------------------------
from contrastive_sentence_embeddings.records import provenance  # noqa: E402
from contrastive_sentence_embeddings.configuration.blocks import run_blocks  # noqa: E402
from contrastive_sentence_embeddings.evaluation.evaluator import evaluation_settings  # noqa: E402
from contrastive_sentence_embeddings.encoders.embedding_cache import model_fingerprint  # noqa: E402

SIMCSE = {"kind": "simcse", "pooling": "cls", "seeds": [42, 43],
          "training": {"max_steps": 4, "seed": 42, "checkpoint_dir": "data/07_model_output/checkpoints/simcse"}}
TODAY = {"encoder": "bert-base-uncased", "methods": ["simcse"], "simcse": SIMCSE, "evaluation": {},
         "baseline": {"poolings": ["cls"]}, "transfer_evaluation": {"evaluation": {"transfer": True}}}
CODE = "code-of-today"


def saved_model(folder):
    """A folder that looks like a saved model (its metadata file), and its fingerprint."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cse_metadata.json").write_text("{}")
    return model_fingerprint(str(folder))


def record(name, sts_avg, model_path, fingerprint, parameters=TODAY, code=CODE,
           evaluated_at="2027-01-01T10:00:00+00:00", evaluation=None, scope="sts", **extra):
    """A metrics record as the evaluator writes it (provenance included), for run ``name``
    of the parameters ``parameters``, scored by ``code``."""
    baseline = name.startswith("baseline-")
    if baseline:
        pooling = name.split("-", 1)[1]
        trained = None
        method, seed = "baseline", None
    else:
        block = run_blocks(parameters)[name]
        pooling, method, seed = block["pooling"], block["kind"], block["training"]["seed"]
        trained = {"parameters": block, "params_hash": provenance.params_hash(block),
                   "config_hash": provenance.config_hash(block), "seed": seed, "encoder": parameters["encoder"],
                   "training": {"code": {"commit": "abc", "dirty": False, "source_hash": code},
                                "data": {"sentences": {"dataset": "wiki_sentences", "fingerprint": "w", "rows": 9}},
                                "trained_at": evaluated_at}}
    overrides = (parameters["transfer_evaluation"]["evaluation"] if scope == "transfer" else
                 {} if baseline else run_blocks(parameters)[name].get("evaluation"))
    settings = evaluation_settings({**parameters["evaluation"], **(evaluation or {})}, overrides)
    return {"model": {"name": name, "path": str(model_path), "pooling": pooling, "method": method,
                      "base_encoder": parameters["encoder"], "seed": seed},
            "sts_avg": sts_avg, "evaluated_at": evaluated_at, "model_fingerprint": fingerprint,
            "provenance": provenance.record_provenance(
                trained, baseline=baseline, encoder=parameters["encoder"], pooling=pooling, model_path=str(model_path),
                model_fingerprint=fingerprint, settings=settings, scored_on={"sts": "s"}, evaluated_at=evaluated_at,
                code={"commit": "abc", "dirty": False, "source_hash": code}),
            **extra}


def today(parameters=TODAY, code=CODE):
    return leaderboard.Today.from_parameters(parameters, source_hash=code)


@pytest.fixture
def checkout(tmp_path):
    """This checkout's two SimCSE seeds (4 steps, models in their folders) and the
    repository's seed 44 of a 120-step run (no model here)."""
    runs = {}
    for seed in (42, 43):
        folder = tmp_path / f"simcse/seed{seed}"
        runs[f"simcse.seed{seed}"] = record(f"simcse.seed{seed}", 74.2 + seed / 100, folder, saved_model(folder))
    committed = {**TODAY, "simcse": {**SIMCSE, "seeds": [42, 43, 44],
                                     "training": {**SIMCSE["training"], "max_steps": 120}}}
    runs["simcse.seed44"] = record("simcse.seed44", 76.68, tmp_path / "simcse/seed44", "fingerprint-elsewhere",
                                   parameters=committed, code="code-of-then", evaluated_at="2026-11-23T13:20:48+00:00")
    return tmp_path, runs


def test_a_run_of_todays_code_and_parameters_is_current(checkout):
    _, runs = checkout
    assert leaderboard.record_status(runs["simcse.seed42"], today()) == (leaderboard.CURRENT, [])


def test_a_changed_parameter_makes_a_run_stale_and_says_which(checkout):
    _, runs = checkout
    longer = {**TODAY, "simcse": {**SIMCSE, "training": {**SIMCSE["training"], "max_steps": 8}}}
    status, reasons = leaderboard.record_status(runs["simcse.seed42"], today(longer))
    assert status == leaderboard.STALE and reasons == ["parameters changed: training.max_steps 4 -> 8"]
    # The list of seeds is not how seed 42 trains: still current with seed 44 added.
    more_seeds = {**TODAY, "simcse": {**SIMCSE, "seeds": [42, 43, 44]}}
    assert leaderboard.record_status(runs["simcse.seed42"], today(more_seeds))[0] == leaderboard.CURRENT
    # ... but a run today's seeds no longer have is stale.
    fewer_seeds = {**TODAY, "simcse": {**SIMCSE, "seeds": [42]}}
    assert "not a run of today's parameters" in leaderboard.record_status(runs["simcse.seed43"],
                                                                          today(fewer_seeds))[1][0]


def test_changed_code_encoder_or_evaluation_settings_make_a_run_stale(checkout):
    _, runs = checkout
    assert leaderboard.record_status(runs["simcse.seed42"], today(code="code-of-tomorrow")) == (
        leaderboard.STALE, ["code changed since training"])
    other_encoder = {**TODAY, "encoder": "roberta-base"}
    assert leaderboard.record_status(runs["simcse.seed42"], today(other_encoder))[1] == [
        "encoder changed: bert-base-uncased -> roberta-base"]
    more_folds = {**TODAY, "evaluation": {"k_folds": 5}}
    assert leaderboard.record_status(runs["simcse.seed42"], today(more_folds))[1] == [
        "evaluation parameters changed: k_folds 10 -> 5"]
    # How fast scores come is no reason: the batch size and the device change no score.
    faster = {**TODAY, "evaluation": {"batch_size": 7, "device": "cpu"}}
    assert leaderboard.record_status(runs["simcse.seed42"], today(faster))[0] == leaderboard.CURRENT


def test_a_methods_evaluation_overrides_are_compared_as_evaluation_settings_not_as_its_parameters(checkout):
    _, runs = checkout
    # simcse.evaluation.batch_size=8 changes how fast the scores come, not the weights or the scores.
    smaller_batches = {**TODAY, "simcse": {**SIMCSE, "evaluation": {"batch_size": 8}}}
    assert leaderboard.record_status(runs["simcse.seed42"], today(smaller_batches)) == (leaderboard.CURRENT, [])
    # An override that decides the scores is caught, as an evaluation setting (the block's own merged in).
    other_split = {**TODAY, "simcse": {**SIMCSE, "evaluation": {"alignment_split": "validation"}}}
    assert leaderboard.record_status(runs["simcse.seed42"], today(other_split)) == (
        leaderboard.STALE, ["evaluation parameters changed: alignment_split \"test\" -> \"validation\""])
    # Logging the loss more often changes no weight either.
    chattier = {**TODAY, "simcse": {**SIMCSE, "training": {**SIMCSE["training"], "log_every": 1}}}
    assert leaderboard.record_status(runs["simcse.seed42"], today(chattier))[0] == leaderboard.CURRENT


def test_a_record_without_its_model_here_is_carried(checkout):
    tmp_path, runs = checkout
    assert leaderboard.record_status(runs["simcse.seed44"], today()) == (
        leaderboard.CARRIED, [f"no model at {tmp_path / 'simcse/seed44'}"])
    # Another model in the folder (retrained since, or copied in): not the record's.
    saved_model(tmp_path / "simcse/seed44")
    assert "not the one scored" in leaderboard.record_status(runs["simcse.seed44"], today())[1][0]
    # A record of the repository's older format (no provenance, no fingerprint) is carried.
    committed = json.loads((PROJECT_ROOT / "data/08_reporting/metrics/simcse.json").read_text())
    older = {key: value for key, value in committed.items() if key not in ("provenance", "model_fingerprint")}
    assert leaderboard.record_status(older, today()) == (
        leaderboard.CARRIED, ["no provenance and no model fingerprint (written before records carried them)"])


def test_the_scores_of_an_earlier_model_of_the_folder_are_stale_and_say_what_to_rerun(tmp_path):
    """The issue's kill during evaluation: SimCSE scored at 4 steps, retrained in the same
    folder, its evaluation killed: the record on disk is the earlier model's."""
    from contrastive_sentence_embeddings.encoders.fingerprint import EARLIER_KEY, lineage_for_save

    once = {**TODAY, "simcse": {**SIMCSE, "seeds": None}}
    folder = tmp_path / "data/06_models/simcse"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"4 steps")
    (folder / "cse_metadata.json").write_text('{"saved_at": "2027-01-01T09:00:00+00:00"}')
    scored = record("simcse", 74.0, folder, model_fingerprint(str(folder)), parameters=once)
    assert leaderboard.record_status(scored, today(once)) == (leaderboard.CURRENT, [])
    earlier = lineage_for_save(folder)  # what the saver records when it replaces that model
    (folder / "model.safetensors").write_bytes(b"12 steps")
    (folder / "cse_metadata.json").write_text(json.dumps({EARLIER_KEY: earlier}))
    assert leaderboard.record_status(scored, today(once)) == (leaderboard.STALE, [
        f"scores of an earlier model: the model now in {folder} was trained after these scores were computed; "
        "rerun `kedro run --namespaces=simcse,card.simcse --tags=evaluation`"])
    # The transfer scores of that model name the transfer command; a seed's run its method's evaluation.
    assert leaderboard.record_status(scored, today(once), "transfer")[1][0].endswith(
        "rerun `kedro run --namespaces=transfer.simcse`")
    assert leaderboard.evaluation_command("simcse.seed43") == \
        "kedro run --namespaces=simcse,card.simcse --tags=evaluation"
    # Other weights the folder never held (produced elsewhere) stay carried.
    elsewhere = record("simcse", 76.0, folder, "sha256-from-elsewhere", parameters=once)
    status, [reason] = leaderboard.record_status(elsewhere, today(once))
    assert status == leaderboard.CARRIED and reason.startswith(f"the model at {folder} is not the one scored")
    # In the table and the summary DVC shows: stale, with the reason; never current, never left out.
    from contrastive_sentence_embeddings.evaluation.summary import leaderboard_summary

    table, _ = board({"simcse": scored}, once)
    row = table.set_index("model").loc["simcse"]
    assert row["status"] == leaderboard.STALE and row["status_reason"].startswith("scores of an earlier model")
    assert leaderboard_summary(table)["simcse"] == {"sts_avg": 74.0, "stale": 1}


def test_a_seed_summary_is_as_current_as_its_worst_run(checkout):
    _, runs = checkout
    from contrastive_sentence_embeddings.pipelines.evaluation.nodes import aggregate_seed_runs

    summary = aggregate_seed_runs(runs["simcse.seed42"], runs["simcse.seed43"])
    assert leaderboard.record_status(summary, today()) == (leaderboard.CURRENT, [])
    status, reasons = leaderboard.record_status(summary, today(code="code-of-tomorrow"))
    assert status == leaderboard.STALE and reasons == ["simcse.seed42: code changed since training",
                                                       "simcse.seed43: code changed since training"]


def test_a_row_joining_sts_and_transfer_records_is_as_current_as_the_worse(checkout):
    """The transfer scores of the same weights (metrics_full/) join the STS row; scored
    by older code, they make the row stale, and say so."""
    _, runs = checkout
    sts = runs["simcse.seed42"]
    transfer = record("simcse.seed42", None, sts["model"]["path"], sts["model_fingerprint"], scope="transfer",
                      evaluated_at="2026-12-01T00:00:00+00:00", MR=80.0)
    table, _ = board({"simcse.seed42": sts}, full={"simcse.seed42": transfer})
    assert (table.loc[0, "status"], table.loc[0, "MR"]) == (leaderboard.CURRENT, 80.0)
    transfer["provenance"]["evaluation"]["code"]["source_hash"] = "code-of-then"
    table, _ = board({"simcse.seed42": sts}, full={"simcse.seed42": transfer})
    assert (table.loc[0, "status"], table.loc[0, "status_reason"]) == (leaderboard.STALE, "code changed since scoring")
    # The transfer settings are compared with transfer_evaluation's, not the method's.
    assert leaderboard.record_status(transfer, today(), "sts")[1][-1].startswith("evaluation parameters changed")


def test_a_transfer_classifier_on_part_of_a_training_split_is_said_under_the_table(checkout):
    """SST-2's classifier on 10,000 of its 67,349 training rows (the CPU default): the
    transfer table says so under it, whichever of the row's two records is newer."""
    _, runs = checkout
    sts = runs["simcse.seed42"]
    transfer = record("simcse.seed42", None, sts["model"]["path"], sts["model_fingerprint"], scope="transfer",
                      evaluated_at="2026-12-01T00:00:00+00:00", MR=80.0, SST2=81.0)
    transfer["evaluation_report"] = {"data": {"transfer training rows used": {
        "SST2": {"used": 10000, "read": 67349, "seed": 1111}}}}
    for when in ("2026-12-01T00:00:00+00:00", "2027-02-01T00:00:00+00:00"):  # older, then newer than the STS record
        transfer["evaluated_at"] = when
        table, metrics = board({"simcse.seed42": sts}, full={"simcse.seed42": transfer})
        assert leaderboard.cut_training_splits(metrics) == {
            "SST2's classifier trained on 10,000 of 67,349 training rows": ["simcse.seed42"]}
        page = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=metrics)
        transfer_section = page.split("## Transfer tasks", 1)[1]
        assert ("**SST2's classifier trained on 10,000 of 67,349 training rows** (every row): not SentEval's "
                "setting, whose classifier sees every training row.") in transfer_section
    whole = dict(transfer, evaluation_report={})
    table, metrics = board({"simcse.seed42": sts}, full={"simcse.seed42": whole})
    page = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=metrics)
    assert "Transfer tasks" in page and "training rows" not in page


def board(records, parameters=TODAY, pairs=None, full=None):
    """The leaderboard node's steps on hand-made records."""
    metrics = leaderboard.newest_metrics(leaderboard.with_status(records, today(parameters)),
                                         leaderboard.with_status(full or {}, today(parameters), "transfer"))
    table = leaderboard.add_uncertainty(leaderboard.metrics_table(metrics), metrics)
    table = leaderboard.add_significance(table, metrics, pairs or {}, n_resamples=50)
    return leaderboard.add_transfer_notes(table, today(parameters).baseline_transfer_poolings), metrics


def test_the_issue_case_keeps_the_repositorys_seed_apart(checkout):
    """A 2-seed, 4-step SimCSE run beside the repository's seed 44 of a 120-step run:
    the summary averages this checkout's two runs only, "Each seed's run" lists them
    only, and seed 44 is shown apart as carried."""
    from contrastive_sentence_embeddings.pipelines.evaluation.nodes import aggregate_seed_runs

    _, runs = checkout
    summary = aggregate_seed_runs(runs["simcse.seed42"], runs["simcse.seed43"], runs["simcse.seed44"])
    assert summary["n_seeds"] == 2 and summary["model"]["seeds"] == [42, 43]
    ours = (runs["simcse.seed42"]["sts_avg"], runs["simcse.seed43"]["sts_avg"])
    assert summary["sts_avg"] == pytest.approx(sum(ours) / 2)
    assert list(summary["left_out"]) == ["simcse.seed44"]
    assert "training.max_steps 120 (kept runs: 4)" in summary["left_out"]["simcse.seed44"]
    table, metrics = board({**runs, "simcse": summary})
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]),
                                                metrics_by_model=metrics)
    own, carried = markdown.split("## Carried from the repository", 1)
    seeds = own.split("## Each seed's run", 1)[1].split("\n## ", 1)[0]
    assert "| simcse.seed42 |" in seeds and "| simcse.seed43 |" in seeds and "simcse.seed44" not in seeds
    assert "| simcse.seed44 |" in carried and "carried: no model at" in carried
    assert "simcse: left out of its seed summary" in own
    assert table.set_index("model").loc["simcse", "status"] == leaderboard.CURRENT

    # Before this checkout's aggregation ran (a partial run), the summary is the
    # repository's: carried, and this checkout's runs are not listed as its runs.
    committed = json.loads((PROJECT_ROOT / "data/08_reporting/metrics/simcse.json").read_text())
    assert sorted(committed["seed_runs"]) == ["simcse.seed42", "simcse.seed43", "simcse.seed44"]
    table, metrics = board({**runs, "simcse": committed})
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=metrics)
    own, carried = markdown.split("## Carried from the repository", 1)
    assert "## Each seed's run" not in own
    apart = own.split("## Seed runs in no seed summary", 1)[1]
    assert "| simcse.seed42 |" in apart and "| simcse.seed43 |" in apart
    assert "| simcse |" in carried and "| simcse.seed44 |" in carried


def test_a_run_of_another_configuration_made_here_is_listed_apart_from_the_summarys_runs(checkout):
    """Seed 44 of the 120-step configuration trained in this checkout too (its model is
    here): stale, left out of the summary, and not listed among the summary's runs."""
    from contrastive_sentence_embeddings.pipelines.evaluation.nodes import aggregate_seed_runs

    tmp_path, runs = checkout
    old = runs["simcse.seed44"]
    here = {**old, "model_fingerprint": saved_model(tmp_path / "simcse/seed44")}
    here["provenance"] = {**old["provenance"], "model": {**old["provenance"]["model"],
                                                         "fingerprint": here["model_fingerprint"]}}
    runs = {**runs, "simcse.seed44": here}
    summary = aggregate_seed_runs(*runs.values())
    table, metrics = board({**runs, "simcse": summary})
    rows = table.set_index("model")
    assert rows.loc["simcse.seed44", "status"] == leaderboard.STALE
    assert rows.loc["simcse.seed44", "status_reason"] == (
        "simcse.seed44 is not a run of today's parameters (`methods` or `seeds` changed; today's runs of simcse: "
        "simcse.seed42, simcse.seed43); code changed since training")
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=metrics)
    seeds = markdown.split("## Each seed's run", 1)[1].split("\n## ", 1)[0]
    apart = markdown.split("## Seed runs in no seed summary", 1)[1].split("\n## ", 1)[0]
    assert "simcse.seed44" not in seeds and "| simcse.seed42 |" in seeds
    assert "| simcse.seed44 |" in apart and "stale: simcse.seed44 is not a run of today's" in apart
    assert "## Carried from the repository" not in markdown


def test_a_cell_that_cannot_be_filled_says_why(checkout):
    tmp_path, runs = checkout
    baseline = record("baseline-cls", 70.0, "bert-base-uncased", "bert-base-uncased")
    with_base = {"simcse.seed42": runs["simcse.seed42"], "baseline-cls": baseline}
    table, _ = board(with_base)
    rows = table.set_index("model")
    assert rows.loc["simcse.seed42", "vs_base_note"] == "no baseline predictions (kedro run --pipelines=baseline)"
    assert rows.loc["baseline-cls", "vs_base_note"] == "n/a (the base)"
    assert rows.loc["simcse.seed42", "transfer_note"].startswith("not run: the transfer tasks score a method's first")
    # TODAY's transfer tasks score the baseline's mean pooling only (the default baseline_poolings).
    assert rows.loc["baseline-cls", "transfer_note"] == ("not scored: cls is not in "
                                                         "transfer_evaluation.baseline_poolings (add it, then "
                                                         "kedro run --nodes=baseline.transfer)")
    no_base, _ = board({"simcse.seed42": runs["simcse.seed42"]})
    assert no_base.loc[0, "vs_base_note"] == "no baseline with cls pooling here (kedro run --pipelines=baseline)"
    # A method run once, without transfer scores: its transfer row says how to get them.
    once = {**TODAY, "simcse": {**SIMCSE, "seeds": None}}
    saved = saved_model(tmp_path / "simcse-once")
    single, _ = board({"simcse": record("simcse", 74.0, tmp_path / "simcse-once", saved, parameters=once)}, once)
    assert single.loc[0, "transfer_note"] == "not run: kedro run --namespaces=transfer.simcse"
    markdown = leaderboard.leaderboard_markdown(single, pd.DataFrame(columns=["method"]))
    transfer = markdown.split("## Transfer tasks", 1)[1].split("\n## ", 1)[0]
    assert "| simcse |" in transfer and "not run: kedro run --namespaces=transfer.simcse" in transfer
    # With both sides' predictions the test runs and the note is empty.
    rng = __import__("numpy").random.default_rng(0)
    gold = {task: rng.uniform(0, 5, 200) for task in ("sts12", "stsb")}
    pairs = {"simcse.seed42": pair_predictions(rng, gold, 0.5), "baseline-cls": pair_predictions(rng, gold, 2.0)}
    tested, _ = board(with_base, pairs=pairs)
    tested = tested.set_index("model")
    assert tested.loc["simcse.seed42", "vs_base_note"] == "" and tested.loc["simcse.seed42", "p_vs_base"] < 0.05


def test_a_baseline_pooling_without_transfer_scores_says_whether_the_transfer_tasks_score_it(checkout):
    baseline = {"baseline-cls": record("baseline-cls", 70.0, "bert-base-uncased", "bert-base-uncased"),
                "baseline-mean": record("baseline-mean", 71.0, "bert-base-uncased", "bert-base-uncased")}
    # Listed: just not run yet.
    listed = {**TODAY, "transfer_evaluation": {**TODAY["transfer_evaluation"], "baseline_poolings": ["mean", "cls"]}}
    table, _ = board(baseline, listed)
    assert set(table["transfer_note"]) == {"not run: kedro run --nodes=baseline.transfer"}
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]),
                                                baseline_poolings=["mean", "cls"])
    transfer = markdown.split("## Transfer tasks", 1)[1].split("\n## ", 1)[0]
    assert "| baseline-cls |" in transfer and "| baseline-mean |" in transfer and "score its" not in transfer
    # Not listed: the note says so, and the page lists no row for a pooling the tasks never score.
    table, _ = board(baseline)
    notes = table.set_index("model")["transfer_note"]
    assert notes["baseline-mean"] == "not run: kedro run --nodes=baseline.transfer"
    assert notes["baseline-cls"].startswith("not scored: cls is not in transfer_evaluation.baseline_poolings")
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), baseline_poolings=["mean"])
    transfer = markdown.split("## Transfer tasks", 1)[1].split("\n## ", 1)[0]
    assert "| baseline-mean |" in transfer and "baseline-cls" not in transfer
    assert "The untrained encoder's transfer tasks score its `mean` pooling only" in transfer


def test_a_fresh_run_keeps_every_committed_number_on_the_page_as_carried(tmp_path):
    """The issue's fresh clone after `make run`: DeCLUTR and the baseline scored again
    here (other weights than the repository's), the repository's transfer scores
    (metrics_full/, no model behind them here any more) stay on the page, carried."""
    committed = {name: json.loads((PROJECT_ROOT / f"data/08_reporting/metrics_full/{name}.json").read_text())
                 for name in ("declutr", "baseline-mean")}
    encoder = committed["declutr"]["model"]["base_encoder"]
    parameters = {**TODAY, "encoder": encoder, "methods": ["declutr"],
                  "declutr": {"kind": "declutr", "pooling": "mean", "training": {"max_steps": 4, "seed": 42}}}
    folder = tmp_path / "declutr"
    fresh = {"declutr": record("declutr", 79.5, folder, saved_model(folder), parameters=parameters,
                               evaluated_at="2027-01-01T10:00:00+00:00", sts_avg_wmean=79.4),
             "baseline-mean": record("baseline-mean", 78.9, encoder, model_fingerprint(encoder),
                                     parameters=parameters, evaluated_at="2027-01-01T09:00:00+00:00")}
    table, metrics = board(fresh, parameters, full=committed)
    rows = table.set_index("model")
    assert rows.loc["declutr", "status"] == leaderboard.CURRENT and math.isnan(rows.loc["declutr", "transfer_avg"])
    # DeCLUTR retrained here: the committed transfer scores are of other weights, kept apart, carried
    # (under their own run's name when the results of record trained seeds: declutr.seed42).
    committed_run = committed["declutr"]["model"]["name"]
    kept_apart = "declutr (earlier model)" if committed_run == "declutr" else committed_run
    earlier = rows.loc[kept_apart]
    assert earlier["status"] == leaderboard.CARRIED
    assert earlier["transfer_avg"] == pytest.approx(committed["declutr"]["transfer_avg"])
    # The baseline's weights are the installed package's in every clone: when the committed
    # record scored those same weights, its transfer scores join the fresh STS row instead.
    same_weights = committed["baseline-mean"].get("model_fingerprint") == model_fingerprint(encoder)
    assert ("baseline-mean (earlier model)" in rows.index) != same_weights
    if same_weights:
        assert rows.loc["baseline-mean", "transfer_avg"] == pytest.approx(committed["baseline-mean"]["transfer_avg"])
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=metrics)
    own, carried = markdown.split("## Carried from the repository", 1)
    assert "earlier model" not in own and kept_apart not in own
    assert f"| {kept_apart} |" in carried
    assert f"{committed['declutr']['transfer_avg']:.2f}" in carried
    # Without statuses (no way to tell a carried record) an entry of other weights is still left out.
    assert list(leaderboard.newest_metrics(
        {"declutr": {**fresh["declutr"], "model_fingerprint": "new"}},
        {"declutr": {**committed["declutr"], "model": {**committed["declutr"]["model"], "name": "declutr"}}})) == \
        ["declutr"]


def test_carried_rows_are_neither_tested_nor_a_base(checkout):
    """A committed baseline (no model here: its encoder has another fingerprint) is no
    base for this checkout's runs, whatever predictions lie around."""
    _, runs = checkout
    baseline = record("baseline-cls", 70.0, "bert-base-uncased", "fingerprint-elsewhere")
    rng = __import__("numpy").random.default_rng(0)
    gold = {"stsb": rng.uniform(0, 5, 100)}
    pairs = {name: pair_predictions(rng, gold, 1.0) for name in ("simcse.seed42", "simcse.seed44", "baseline-cls")}
    table, _ = board({**runs, "baseline-cls": baseline}, pairs=pairs)
    rows = table.set_index("model")
    assert rows.loc["baseline-cls", "status"] == leaderboard.CARRIED
    assert rows.loc["simcse.seed42", "vs_base_note"].startswith("no baseline with cls pooling here")
    assert rows.loc["simcse.seed44", "vs_base_note"] == "carried: not compared with this checkout's runs"
    assert math.isnan(rows.loc["simcse.seed44", "p_vs_base"])


def test_the_csv_keeps_its_columns_and_adds_status_and_reasons(checkout):
    _, runs = checkout
    table, _ = board(runs)
    csv = leaderboard.csv_table(table)
    first = ["model", "method", "base_encoder", "pooling", "seed", "evaluated_at", *leaderboard.STS_COLUMNS]
    assert list(csv.columns[:len(first)]) == first
    # the columns added since come last, in the order they were added (no reference set: none of its columns)
    later = [*leaderboard.STATUS_COLUMNS, *leaderboard.NOTE_COLUMNS, *leaderboard.SEED_INTERVAL_COLUMNS]
    assert list(csv.columns[-len(later):]) == later
    assert not set(leaderboard.REFERENCE_COLUMNS) & set(csv.columns)
    assert pd.api.types.is_float_dtype(csv["sts_avg"]) and pd.api.types.is_float_dtype(csv["delta_vs_base"])
    rows = csv.set_index("model")
    assert rows.loc["simcse.seed42", "params_hash"] == provenance.short(
        runs["simcse.seed42"]["provenance"]["params_hash"])
    assert rows.loc["simcse.seed42", "source_hash"] == provenance.short(CODE)
    assert rows.loc["simcse.seed42", "commit"] == "abc" and rows.loc["simcse.seed42", "dirty"] == "false"


def test_the_log_summary_is_a_few_aligned_columns_of_the_best_own_rows(checkout):
    from contrastive_sentence_embeddings.pipelines.evaluation.nodes import aggregate_seed_runs

    _, runs = checkout
    summary = aggregate_seed_runs(runs["simcse.seed42"], runs["simcse.seed43"])
    baseline = record("baseline-cls", 70.0, "bert-base-uncased", "bert-base-uncased")
    table, _ = board({**runs, "simcse": summary, "baseline-cls": baseline})
    text = leaderboard.summary_text(table, top=1)
    lines = text.splitlines()
    assert lines[0] == "4 row(s) from this checkout (4 current), 1 carried from the repository"
    header, best = lines[1], lines[2]
    assert header.split() == ["model", "status", "pooling", "STS", "avg", "vs", "base", "transfer"]
    # The method's summary over seeds (its runs are in the Markdown), its note without the command.
    assert best.split()[:3] == ["simcse", "current", "cls"] and "no baseline predictions" in best
    assert "kedro run" not in best
    # Aligned: each column starts where its header does; right-aligned numbers end where theirs does.
    assert best.index("current") == header.index("status") and best.index("cls") == header.index("pooling")
    cell = leaderboard.spread_cell(summary["sts_avg"], summary["sts_avg_std"])
    assert cell == "74.62 +- 0.01" and best.index(cell) + len(cell) == header.index("STS avg") + len("STS avg")
    assert lines[3] == "  ... 1 more in data/08_reporting/leaderboard.md"
    assert lines[4] == "best carried row (reference, not produced here): simcse.seed44 STS avg 76.68"
    assert max(len(line) for line in lines) < 120


def test_the_figure_marks_carried_points(checkout):
    from contrastive_sentence_embeddings.pipelines.evaluation.nodes import aggregate_seed_runs

    tmp_path, runs = checkout
    summary = aggregate_seed_runs(runs["simcse.seed42"], runs["simcse.seed43"])
    once = {**TODAY, "simcse": {**SIMCSE, "seeds": None}}
    gone = record("simcse", 76.0, tmp_path / "gone", "fingerprint-elsewhere", parameters=once)
    gone["model"]["name"] = "simcse-committed"
    table, _ = board({**runs, "simcse": summary, "simcse-committed": gone})
    geometry = {"simcse.seed42": (0.2, -2.0), "simcse.seed43": (0.3, -2.5), "simcse.seed44": (0.25, -2.4),
                "simcse": (0.25, -2.25), "simcse-committed": (0.1, -1.0)}
    table["alignment"] = [geometry[m][0] for m in table["model"]]
    table["uniformity"] = [geometry[m][1] for m in table["model"]]
    figure = leaderboard.alignment_uniformity_figure(table)
    axis = figure.axes[0]
    legend = next(text.get_text() for text in axis.texts if "  " in text.get_text())
    # This checkout's summary unmarked, the committed row marked; seeds' runs are small points, not named.
    assert legend.splitlines() == ["1  simcse", "2  simcse-committed [carried]"]
    hollow = [c for c in axis.collections if len(c.get_offsets()) and not c.get_facecolors().any()]
    assert sorted(map(tuple, (offset for c in hollow for offset in c.get_offsets()))) == [(-2.4, 0.25), (-1.0, 0.1)]
    assert "hollow: carried" in axis.get_title()


# --- which checkout and which machine -----------------------------------------------------
AMD = {"machine": {"cpu": "AMD EPYC 9R14", "architecture": "x86_64", "cpu_flags": ["avx2", "avx512f"], "gpu": None},
       "libraries": {"torch": "2.13.0+cpu", "transformers": "5.24.0"}}


def on_machine(record, environment):
    """``record`` as if scored on ``environment`` (its evaluation side's record)."""
    record = json.loads(json.dumps(record))
    record["provenance"]["evaluation"]["environment"] = environment
    return record


def test_every_new_record_names_its_machine_and_library_versions(checkout):
    """Both sides of a record say what computed them: the evaluation's environment, and
    (through the model's metadata) the training's."""
    from contrastive_sentence_embeddings.records import provenance

    _, runs = checkout
    environment = runs["simcse.seed42"]["provenance"]["evaluation"]["environment"]
    assert environment == provenance.environment_record()
    assert environment["machine"]["cpu"] and environment["machine"]["architecture"]
    assert set(environment["machine"]["cpu_flags"]) <= set(provenance.RECORDED_CPU_FLAGS)
    for library in ("torch", "transformers", "accelerate", "datasets", "sentence-transformers", "python"):
        assert environment["libraries"][library], library
    trained = provenance.training_provenance({"kind": "simcse", "training": {"seed": 1}}, "enc", {})
    assert trained["training"]["environment"] == provenance.environment_record()


def test_rows_of_two_machines_are_marked_and_their_comparison_says_so(checkout):
    tmp_path, runs = checkout
    base = record("baseline-cls", 70.0, "sentence-transformers/all-MiniLM-L6-v2", "base-print")
    here = runs["simcse.seed42"]
    rows = {"baseline-cls": on_machine(base, AMD), "simcse.seed42": here}
    table = leaderboard.metrics_table(rows)
    keys = dict(zip(table["model"], table["environment"]))
    assert keys["simcse.seed42"] != keys["baseline-cls"] and all(keys.values())
    import numpy as np

    rng = np.random.default_rng(0)
    gold = {"sts12": rng.uniform(0, 5, 200)}
    pairs = {name: pair_predictions(rng, gold, 0.5) for name in rows}
    table = leaderboard.add_significance(leaderboard.add_uncertainty(table, rows), rows, pairs, n_resamples=50)
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=rows)
    lines = markdown.splitlines()
    shown = {}  # each model's cells in the first table that shows it, by column
    for start in [i for i, line in enumerate(lines) if line.startswith("| model |")]:
        header = [cell.strip() for cell in lines[start].strip("|").split("|")]
        for line in lines[start + 2:lines.index("", start)]:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            shown.setdefault(cells[0], dict(zip(header, cells)))
    assert shown["baseline-cls"]["env"] == "E1" and shown["simcse.seed42"]["env"] == "E2"
    assert any(line.startswith("- E1: AMD EPYC 9R14 (AVX-512), torch 2.13.0+cpu") for line in lines)
    assert "base scored in another env" in shown["simcse.seed42"]["vs base"]


def test_one_machine_is_named_once_and_the_page_says_which_checkout_built_it(checkout):
    from contrastive_sentence_embeddings.records import provenance

    _, runs = checkout
    rows = {name: runs[name] for name in ("simcse.seed42", "simcse.seed43")}
    table = leaderboard.metrics_table(rows)
    built = {"commit": "0123456789abcdef", "dirty": True, "environment": AMD, "built_at": "2027-01-02T03:04:05+00:00"}
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=rows,
                                                built=built)
    assert ("This page describes the checkout that built it: commit 0123456789ab with uncommitted changes in src/ "
            "or conf/, on AMD EPYC 9R14 (AVX-512), torch 2.13.0+cpu, transformers 5.24.0, at 2027-01-02 03:04 UTC."
            in markdown)
    assert "rebuild it with `kedro run --pipelines=leaderboard`" in markdown
    label = provenance.environment_label(provenance.environment_record())
    assert f"Every score here was computed on one environment: {label}." in markdown
    assert "| env |" not in markdown


def test_a_model_folder_with_a_cut_metadata_file_or_a_lost_file_is_named_as_broken(tmp_path):
    """Not "other fingerprint": the folder's damage is named, file by file."""
    from contrastive_sentence_embeddings.encoders.fingerprint import FINGERPRINT_KEY, content_fingerprint

    once = {**TODAY, "simcse": {**SIMCSE, "seeds": None}}
    folder = tmp_path / "data/06_models/simcse"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights of 12 steps")
    (folder / "tokenizer.json").write_text("{}")
    recorded = content_fingerprint(folder)
    metadata = json.dumps({FINGERPRINT_KEY: recorded, "saved_at": "2027-01-01T09:00:00+00:00"})
    (folder / "cse_metadata.json").write_text(metadata)
    scored = record("simcse", 74.0, folder, recorded["digest"], parameters=once)
    assert leaderboard.record_status(scored, today(once)) == (leaderboard.CURRENT, [])

    (folder / "cse_metadata.json").write_text(metadata[: len(metadata) // 2])
    status, [reason] = leaderboard.record_status(scored, today(once))
    assert status == leaderboard.CARRIED
    assert reason.startswith(f"the model folder {folder} is broken: cse_metadata.json is not valid JSON (")
    assert "other fingerprint" not in reason

    (folder / "cse_metadata.json").write_text(metadata)
    (folder / "tokenizer.json").unlink()
    status, [reason] = leaderboard.record_status(scored, today(once))
    assert status == leaderboard.CARRIED and "is broken: tokenizer.json is missing" in reason


def test_a_row_scored_on_fewer_pairs_than_the_benchmark_says_so_under_the_table(checkout):
    """A subset lost to bad input: the task is scored on the rest, and the page says which
    row, which task and how many pairs, so the number is not read as the benchmark's."""
    _, runs = checkout
    short = dict(runs["simcse.seed42"])
    short["evaluation_report"] = {"pairs": {"sts12": 2358, "sts13": 1500},
                                  "benchmark_pairs": {"sts12": 3108, "sts13": 1500}}
    metrics = {"simcse.seed42": short}
    assert leaderboard.short_scores(metrics) == {"simcse.seed42": ["sts12 2,358 of 3,108 pairs"]}
    table, metrics = board(metrics)
    page = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]), metrics_by_model=metrics)
    assert ("**simcse.seed42: scored on fewer pairs than the benchmark**, not comparable with published scores: "
            "sts12 2,358 of 3,108 pairs") in page
    whole = leaderboard.leaderboard_markdown(*board({"simcse.seed42": runs["simcse.seed42"]})[:1],
                                             pd.DataFrame(columns=["method"]),
                                             metrics_by_model={"simcse.seed42": runs["simcse.seed42"]})
    assert "fewer pairs than the benchmark" not in whole
