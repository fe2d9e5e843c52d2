"""Comparing DVC experiments: ``contrastive-sentence-embeddings experiments`` ranks them
by a method's STS average from the summary, and the documented ``dvc exp show`` and
``dvc metrics diff`` commands fit 120 columns.

The end-to-end test builds a scratch git + DVC repository whose one stage writes a
summary shaped like the project's (the committed one, with SimCSE's entry computed
from the parameters), queues a 2 x 2 grid and runs it, as a user would with the real
pipeline (which the parameters' own tests run)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from contrastive_sentence_embeddings.records.experiments import (
    SUMMARY_FILE,
    changed_params,
    default_model,
    main,
    rank,
    ranking_table,
    read_experiments,
    short_names,
)
from tests.helpers import PROJECT_ROOT

# The command README.md documents for comparing experiments (checked against it below).
EXP_SHOW = ["exp", "show", "--only-changed", "--hide-failed", "--hide-queued", "--drop", r"Created|State|Executor|.*\.p$|^data/|^src/",
            "--sort-by", "simcse.sts_avg", "--sort-order", "desc"]


def commit_entry(name: str, rev: str, params: dict, summary: dict | None, experiments=None) -> dict:
    """One commit of ``dvc exp show --json`` (DVC 3's layout)."""
    return {"rev": rev, "name": name, "error": None, "experiments": experiments,
            "data": {"rev": rev, "params": {"params.yaml": {"data": params}},
                     "metrics": {SUMMARY_FILE: {"data": summary}} if summary else {}, "deps": {}, "outs": {}}}


def experiment_entry(name: str, rev: str, state: str | None, params: dict, summary: dict | None,
                     log: str | None = None, returncode: int | None = None) -> dict:
    executor = None if state is None else {"state": state, "name": "dvc-task",
                                           "local": {"log": log, "returncode": returncode}}
    revision = commit_entry(name, rev, params, summary)
    if state == "failed":  # as DVC's queue reports one (celery.py, collect_failed_data)
        revision["error"] = {"msg": "Experiment run failed", "type": ""}
    return {"name": name, "executor": executor, "revs": [revision]}


def simcse(sts_avg: float) -> dict:
    """A summary in which SimCSE's entry varies (DeCLUTR's, first, does not)."""
    return {"declutr": {"sts_avg": 79.23},
            "simcse": {"sts_avg": sts_avg, "vs_base": round(sts_avg - 76.0, 2), "p": 0.001, "examples": 7680,
                       "seconds": 900},
            "baseline": {"cls_before_pooler": 73.69}}


def params(learning_rate: float, seed: int) -> dict:
    return {"seed": seed, "simcse": {"training": {"learning_rate": learning_rate, "batch_size": 64}}}


SHOW = [
    commit_entry(None, "workspace", params(3e-5, 42), simcse(76.5)),
    commit_entry("main", "a" * 40, params(3e-5, 42), simcse(76.5), experiments=[
        experiment_entry("lucky-run", "b" * 40, "success", params(1e-5, 42), simcse(77.25)),
        experiment_entry("plain-run", "c" * 40, None, params(5e-5, 43), simcse(75.0)),
        experiment_entry("later-run", "d" * 40, "queued", params(5e-5, 42), None),
    ]),
]


def test_the_experiments_of_dvc_exp_show_with_their_state_parameters_and_summary():
    experiments = read_experiments(SHOW)
    assert [(e.name, e.rev, e.state) for e in experiments] == [
        ("main", "aaaaaaa", "commit"), ("lucky-run", "bbbbbbb", "success"), ("plain-run", "ccccccc", "success"),
        ("later-run", "ddddddd", "queued")]
    assert experiments[1].params["params.yaml:simcse.training.learning_rate"] == 1e-5
    assert experiments[1].summary["simcse"]["sts_avg"] == 77.25 and experiments[3].summary == {}
    assert changed_params(experiments) == ["params.yaml:seed", "params.yaml:simcse.training.learning_rate"]
    with pytest.raises(ValueError, match="expected a list"):
        read_experiments({"not": "a list"})


def test_parameters_are_named_by_their_shortest_unambiguous_suffix():
    assert short_names(["p.yaml:seed", "p.yaml:simcse.training.learning_rate"]) == {
        "p.yaml:seed": "seed", "p.yaml:simcse.training.learning_rate": "learning_rate"}
    assert short_names(["p.yaml:simcse.training.learning_rate", "p.yaml:scd.training.learning_rate"]) == {
        "p.yaml:simcse.training.learning_rate": "simcse.training.learning_rate",
        "p.yaml:scd.training.learning_rate": "scd.training.learning_rate"}


def test_experiments_are_ranked_by_the_method_the_grid_changed_and_the_unscored_follow():
    experiments = read_experiments(SHOW)
    assert default_model(experiments) == "simcse"  # declutr's score is the same everywhere
    ranked, unranked = rank(experiments, "simcse")
    assert [e.name for e in ranked] == ["lucky-run", "main", "plain-run"]
    assert [e.name for e in unranked] == ["later-run"]
    lines = ranking_table(experiments, "simcse").splitlines()
    assert lines[0].split() == ["rank", "experiment", "STS", "avg", "vs", "base", "p", "examples",
                                "seconds", "seed", "learning_rate"]
    assert lines[1].split() == ["1", "lucky-run", "(bbbbbbb)", "77.25", "+1.25", "0.001", "7680", "900", "42",
                                "1e-05"]
    assert lines[3].split()[:5] == ["3", "plain-run", "(ccccccc)", "75", "-1.00"]
    assert lines[4].split() == ["-", "later-run", "(ddddddd)", "queued", "-", "-", "-", "-", "42", "5e-05"]


def test_with_a_reference_row_the_ranking_shows_each_run_against_it():
    def against_simcse(sts_avg, vs_ref, p_ref):
        summary = simcse(76.5)
        summary["imsimcse"] = {"sts_avg": sts_avg, "vs_base": round(sts_avg - 76.0, 2), "p": 0.01,
                               "vs_ref": vs_ref, "p_ref": p_ref, "examples": 7680, "seconds": 300}
        return summary

    def with_reference(learning_rate):
        return {**params(learning_rate, 42), "leaderboard": {"reference": "simcse"}}

    show = [commit_entry("main", "a" * 40, with_reference(3e-5), against_simcse(76.6, 0.1, 0.841), experiments=[
        experiment_entry("better", "b" * 40, "success", with_reference(1e-5), against_simcse(77.9, 1.4, 0.001))])]
    lines = ranking_table(read_experiments(show), "imsimcse").splitlines()
    assert lines[0].split() == ["rank", "experiment", "STS", "avg", "vs", "base", "p", "vs", "simcse", "p", "ref",
                                "examples", "seconds", "learning_rate"]
    assert lines[1].split()[:8] == ["1", "better", "(bbbbbbb)", "77.9", "+1.90", "0.010", "+1.40", "0.001"]
    assert lines[2].split()[:8] == ["2", "main", "(aaaaaaa)", "76.6", "+0.60", "0.010", "+0.10", "0.841"]
    # Without a reference in any run, no such column (the table above stays as it was).
    assert "ref" not in ranking_table(read_experiments(SHOW), "simcse").splitlines()[0]


def test_a_grid_over_the_longest_shipped_method_s_knobs_fits_120_columns():
    """A user's grid over two knobs of a method with a long name (the shipped
    simcse_decorrelation): the method is named in the title line only, and each
    parameter by its shortest unambiguous suffix, so the table stays within 120 columns
    with DVC's longest experiment names."""
    method = "simcse_decorrelation"

    def knobs(rate: float, temperature: float) -> dict:
        return {"seed": 42, method: {"training": {"learning_rate": rate, "batch_size": 64},
                                     "method": {"temperature": temperature}}}

    def summary(score: float) -> dict:
        return {"declutr": {"sts_avg": 79.12}, method: {"sts_avg": score, "vs_base": round(score - 73.69, 2),
                                                        "p": 0.001, "examples": 1_920_000, "seconds": 12345}}

    grid = [experiment_entry(f"unpaved-{word}", f"{k}" * 40, "success", knobs(rate, temperature),
                             summary(76.0 + k / 10))
            for k, (word, rate, temperature) in enumerate([("blaeberries", 1e-5, 0.05), ("quadrupling", 3e-5, 0.05),
                                                          ("overstudied", 1e-5, 0.1), ("bamboozling", 3e-5, 0.1)],
                                                         start=1)]
    show = [commit_entry("main", "a" * 40, knobs(3e-5, 0.05), summary(76.0), experiments=grid)]
    table = ranking_table(read_experiments(show), method)
    assert max(map(len, table.splitlines())) <= 120, table
    assert table.splitlines()[0].split()[-2:] == ["learning_rate", "temperature"]
    assert len(table.splitlines()) == 6


def test_the_command_reads_a_saved_json_and_refuses_a_method_no_run_has(tmp_path, capsys):
    saved = tmp_path / "show.json"
    saved.write_text(json.dumps(SHOW))
    assert main(["--json", str(saved)]) == 0
    assert "ranked by simcse's STS avg" in capsys.readouterr().out
    assert main(["--json", str(saved), "--method", "scd"]) == 1
    assert "no experiment's summary has 'scd'; it has: declutr, simcse" in capsys.readouterr().err
    saved.write_text("[")
    assert main(["--json", str(saved)]) == 1
    assert capsys.readouterr().err.startswith("error: ")


# --- for real: git, DVC, a queued grid ------------------------------------------------------
WRITE_SUMMARY = '''
import json, os, yaml
params = yaml.safe_load(open("params.yaml"))
summary = json.load(open("committed_summary.json"))
rate, seed = float(params["simcse"]["training"]["learning_rate"]), int(params["seed"])
if rate <= 0:
    raise SystemExit(f"Error: simcse.training.learning_rate = {rate:g} (set in params.yaml): must be > 0")
score = round(70 + rate * 1e5 + seed / 100, 2)
summary["simcse"] = {"sts_avg": score, "vs_base": round(score - 73.69, 2), "p": round(0.5 / (1 + rate * 1e5), 3),
                     "examples": 7680, "seconds": int(900 + rate * 1e7 + seed)}
os.makedirs("data/08_reporting", exist_ok=True)
json.dump(summary, open("data/08_reporting/summary.json", "w"), indent=2)
'''


def run(command: list[str], cwd: Path, **env) -> str:
    environment = {**os.environ, "DVC_NO_ANALYTICS": "1", "COLUMNS": "120",
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    done = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    return done.stdout


def dvc(*args: str, cwd: Path) -> str:
    return run([sys.executable, "-m", "dvc", *args], cwd)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.fail("git is needed for DVC experiments")
    repo = tmp_path_factory.mktemp("experiments")
    run(["git", "init", "-q"], repo)
    run(["git", "config", "user.email", "test@example.com"], repo)
    run(["git", "config", "user.name", "test"], repo)
    dvc("init", "-q", cwd=repo)
    shutil.copy(PROJECT_ROOT / SUMMARY_FILE, repo / "committed_summary.json")
    (repo / "write_summary.py").write_text(WRITE_SUMMARY)
    (repo / "params.yaml").write_text(yaml.safe_dump(params(3.0e-5, 42)))
    stage = {"cmd": f"{sys.executable} write_summary.py", "deps": ["write_summary.py", "committed_summary.json"],
             "params": ["seed", "simcse"], "metrics": [{SUMMARY_FILE: {"cache": False}}]}
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"leaderboard": stage}}))
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "scratch project"], repo)
    dvc("repro", "-q", cwd=repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "its results"], repo)
    dvc("exp", "run", "--queue", "-S", "simcse.training.learning_rate=1.0e-5,5.0e-5", "-S", "seed=42,43", cwd=repo)
    # One more run that fails, as a bad value would in the project (its summary stays the workspace's).
    dvc("exp", "run", "--queue", "-S", "simcse.training.learning_rate=-1", cwd=repo)
    environment = {**os.environ, "DVC_NO_ANALYTICS": "1",
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "dvc", "exp", "run", "--run-all"], cwd=repo, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert "Failed" in dvc("queue", "status", cwd=repo), done.stdout + done.stderr
    return repo


def expected_score(rate: float, seed: int) -> str:
    return f"{round(70 + rate * 1e5 + seed / 100, 2):g}"


@pytest.mark.integration
def test_the_documented_exp_show_fits_120_columns_and_shows_every_run(grid):
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert "dvc " + " ".join(a if re.fullmatch(r"[\w.-]+", a) else f"'{a}'" for a in EXP_SHOW) in readme
    table = dvc(*EXP_SHOW, "--no-pager", cwd=grid)
    lines = table.splitlines()
    assert max(map(len, lines)) <= 120 and "…" not in table, table
    assert re.search(r"simcse\.sts_avg\s+simcse\.vs_base\s+simcse\.seconds\s+seed\s+simcse\.training\.learning_rate",
                     table), table
    rows = [line for line in lines if "[" in line]  # the experiments, under the commit
    assert len(rows) == 4
    scores = [float(line.split()[3]) for line in rows]
    assert scores == sorted(scores, reverse=True)
    assert sorted(scores) == sorted(float(expected_score(rate, seed)) for rate in (1e-5, 5e-5) for seed in (42, 43))


@pytest.mark.integration
def test_dvc_metrics_diff_lists_the_summary_a_metric_a_line_within_120_columns(grid):
    table = dvc("metrics", "diff", "--all", cwd=grid)
    assert max(map(len, table.splitlines())) <= 120
    assert re.search(r"summary\.json\s+simcse\.sts_avg\s+73\.42\s+73\.42", table), table
    committed = json.loads((PROJECT_ROOT / SUMMARY_FILE).read_text())["declutr"]["vs_base"]
    assert re.search(rf"summary\.json\s+declutr\.vs_base\s+{re.escape(f'{committed:g}')}\s", table), table


@pytest.mark.integration
def test_the_ranking_command_ranks_the_grid_by_sts_avg(grid):
    out = run([sys.executable, "-m", "contrastive_sentence_embeddings", "experiments"], grid,
              PYTHONPATH=str(PROJECT_ROOT / "src"))
    lines = out.splitlines()
    assert lines[0] == f"6 experiment(s), ranked by simcse's STS avg ({SUMMARY_FILE}):"
    assert max(map(len, lines)) <= 120
    failed = [line.split() for line in lines[2:] if line.split()[0] == "-"]
    assert len(failed) == 1 and failed[0][3] == "failed" and failed[0][4:8] == ["-"] * 4, out
    assert re.search(r"failed: Error: simcse.training.learning_rate = -1 \(set in params.yaml\): must be > 0", out), out
    rows = [line.split() for line in lines[2:7]]
    assert [row[0] for row in rows] == ["1", "2", "3", "4", "5"]
    # learning rate and seed are the last two columns; the score is the fourth
    assert [row[3] for row in rows] == [expected_score(float(row[-1]), int(row[-2])) for row in rows]
    assert [float(row[3]) for row in rows] == sorted((float(row[3]) for row in rows), reverse=True)
    assert {row[-1] for row in rows} == {"1e-05", "3e-05", "5e-05"}


def test_a_failed_running_or_queued_run_shows_its_state_and_error_never_a_score(tmp_path, capsys):
    """DVC shows a failed or queued run with the summary of the workspace it was queued
    from (here the commit's 76.5, which would rank it 2nd); it is listed unranked with
    its state and no number, and a failed run's error line is read from its log."""
    log = tmp_path / "failed-run.out"
    log.write_text("Running stage 'train@simcse':\n> kedro run --namespaces=simcse\n"
                   "Error: simcse.training.learning_rate = -1 (set in params.yaml): must be > 0\n"
                   "ERROR: failed to reproduce 'train@simcse': failed to run: kedro run, exited with 1\n")
    show = [commit_entry("main", "a" * 40, params(3e-5, 42), simcse(76.5), experiments=[
        experiment_entry("good-run", "b" * 40, "success", params(1e-5, 42), simcse(77.25)),
        experiment_entry("bad-run", "c" * 40, "failed", params(-1, 42), simcse(76.5), str(log), 255),
        experiment_entry("lost-log", "d" * 40, "failed", params(-2, 42), simcse(76.5), str(tmp_path / "gone"), 1),
        experiment_entry("busy-run", "e" * 40, "running", params(2e-5, 42), simcse(76.5)),
        experiment_entry("next-run", "f" * 40, "queued", params(4e-5, 42), simcse(76.5)),
    ])]
    experiments = read_experiments(show)
    assert [e.error for e in experiments if e.state == "failed"] == [
        "Error: simcse.training.learning_rate = -1 (set in params.yaml): must be > 0",
        "Experiment run failed (exit 1)"]
    ranked, unranked = rank(experiments, "simcse")
    assert [e.name for e in ranked] == ["good-run", "main"]
    assert [e.name for e in unranked] == ["bad-run", "lost-log", "busy-run", "next-run"]
    rows = [line.split() for line in ranking_table(experiments, "simcse").splitlines()[1:]]
    for row, state in zip(rows[2:], ["failed", "failed", "running", "queued"]):
        assert row[0] == "-" and row[3] == state and row[4:8] == ["-"] * 4, row
    assert "76.5" not in " ".join(" ".join(row) for row in rows[2:])
    saved = tmp_path / "show.json"
    saved.write_text(json.dumps(show))
    assert main(["--json", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "bad-run failed: Error: simcse.training.learning_rate = -1 (set in params.yaml): must be > 0" in out
    assert "dvc queue logs" in out


def test_a_score_the_summary_marks_stale_is_ranked_and_says_so():
    stale = simcse(78.0)
    stale["simcse"]["stale"] = 1
    show = [commit_entry("main", "a" * 40, params(1e-5, 42), simcse(76.5), experiments=[
        experiment_entry("old-code-run", "b" * 40, "success", params(3e-5, 42), stale)])]
    lines = ranking_table(read_experiments(show), "simcse").splitlines()
    assert lines[1].split()[:5] == ["1", "old-code-run", "(bbbbbbb)", "78", "(stale)"]
    assert "(stale)" not in lines[2]
