"""DVC experiments ranked by a method's STS average:
``contrastive-sentence-embeddings experiments``.

It reads ``dvc exp show --json`` (the commit's row and its experiments: run, running,
queued or failed), takes each one's summary (``data/08_reporting/summary.json``,
``evaluation.summary``) and the parameters that differ between them, and prints one
row per experiment, best first::

    rank  experiment          STS avg  vs base      p  examples  seconds  learning_rate  seed
       1  exp-3a1b2 (9b41432)    79.54    +0.31  0.150      7680      612          1e-05    42

With ``leaderboard.reference`` set (a row every other is tested against), two more
columns follow ``p``: ``vs <reference>`` and ``p ref``, the summary's ``vs_ref``/``p_ref``.

Only the commit's row and experiments that ran to the end (DVC's ``success``) are
ranked. The others (queued, running, failed) follow, unranked, with their state and no
number: DVC collects a failed or queued run's files from the workspace it was queued
from, so the summary it shows for one is another run's. Under the table, each failed
run's error (the first line that says so in its log) and how to read the whole log.
The functions below are pure (they take the parsed JSON); :func:`main` runs DVC.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contrastive_sentence_embeddings.configuration.layering import flatten

SUMMARY_FILE = "data/08_reporting/summary.json"
BASELINE = "baseline"


@dataclass(frozen=True)
class Experiment:
    """One row of ``dvc exp show``: ``name`` (the experiment's, or the branch's for the
    commit row), ``rev`` (short commit), ``state`` (``commit`` for the commit the
    experiments derive from; else DVC's: ``success``, ``running``, ``queued``,
    ``failed``), ``params`` flattened to ``<file>:<dotted.key>``, and its summary."""

    name: str
    rev: str
    state: str
    params: Mapping[str, Any] = field(default_factory=dict)
    summary: Mapping[str, Mapping] = field(default_factory=dict)
    error: str = ""

    @property
    def scored(self) -> bool:
        """Whether its files are its own: the commit's, or an experiment's that ran to the end."""
        return self.state in SCORED_STATES


# DVC's states whose metrics a run produced itself; a queued, running or failed one shows the
# workspace's (or a half-written) summary.
SCORED_STATES = ("commit", "success")


def error_line(log: str) -> str:
    """The line of a run's log that says why it failed: the project's one-line ``Error:``
    (cli.py prints every known failure so), else DVC's ``ERROR:``, else the last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for prefix in ("Error:", "ERROR:"):
        for line in lines:
            if line.startswith(prefix):
                return line
    return lines[-1] if lines else ""


def _failure(experiment: Mapping, revision: Mapping) -> str:
    """A failed run's error line, from the log DVC's queue kept (``executor.local.log``),
    else DVC's own error text and the exit code."""
    local = (experiment.get("executor") or {}).get("local") or {}
    log = local.get("log")
    if log:
        try:
            with open(log, encoding="utf-8", errors="replace") as handle:
                line = error_line(handle.read())
            if line:
                return line
        except OSError:
            pass
    message = ((revision.get("error") or {}).get("msg") if isinstance(revision.get("error"), Mapping)
               else revision.get("error")) or "failed"
    code = local.get("returncode")
    return f"{message} (exit {code})" if code not in (None, 0) else str(message)


def _experiment(name: str, revision: Mapping, state: str) -> Experiment:
    data = revision.get("data") or {}
    params = {f"{file}:{key}": value for file, content in (data.get("params") or {}).items()
              for key, value in flatten((content or {}).get("data") or {}).items()}
    summary = ((data.get("metrics") or {}).get(SUMMARY_FILE) or {}).get("data") or {}
    error = revision.get("error")
    message = str((error.get("msg") if isinstance(error, Mapping) else error) or "") if error else ""
    if error and state in ("success", "commit"):
        state = "failed"
    return Experiment(name, str(revision.get("rev") or "")[:7], state, params, summary, message)


def read_experiments(show: Sequence[Mapping]) -> list[Experiment]:
    """The commits and experiments of ``dvc exp show --json`` (the workspace row left
    out: it repeats the commit's or the last experiment's results)."""
    if not isinstance(show, Sequence) or any(not isinstance(entry, Mapping) for entry in show):
        raise ValueError("dvc exp show --json: expected a list of commit entries")
    experiments = []
    for entry in show:
        if entry.get("rev") == "workspace":
            continue
        experiments.append(_experiment(entry.get("name") or str(entry.get("rev"))[:7], entry, "commit"))
        for experiment in entry.get("experiments") or []:
            state = (experiment.get("executor") or {}).get("state") or "success"
            for revision in (experiment.get("revs") or [])[:1]:
                found = _experiment(experiment.get("name") or revision.get("name") or "", revision, state)
                if found.state == "failed":
                    found = replace(found, error=_failure(experiment, revision))
                experiments.append(found)
    return experiments


def changed_params(experiments: Iterable[Experiment]) -> list[str]:
    """The parameters whose value is not the same in every experiment, in file order."""
    experiments = list(experiments)
    keys = list(dict.fromkeys(key for experiment in experiments for key in experiment.params))
    missing = object()
    return [key for key in keys
            if len({json.dumps(e.params.get(key, missing), sort_keys=True, default=str) for e in experiments}) > 1]


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Each ``<file>:<dotted.key>`` as its shortest dotted suffix that no other key of
    ``keys`` ends with (``simcse.training.learning_rate`` -> ``learning_rate``)."""
    names = {}
    for key in keys:
        parts = key.split(":", 1)[-1].split(".")
        for length in range(1, len(parts) + 1):
            candidate = ".".join(parts[-length:])
            clashes = [other for other in keys if other != key
                       and (other.split(":", 1)[-1] == candidate or other.split(":", 1)[-1].endswith("." + candidate))]
            if not clashes:
                names[key] = candidate
                break
        else:
            names[key] = key
    return names


def trained_models(experiments: Iterable[Experiment]) -> list[str]:
    return list(dict.fromkeys(model for e in experiments for model in e.summary if model != BASELINE))


def sts_avg(experiment: Experiment, model: str) -> float | None:
    value = (experiment.summary.get(model) or {}).get("sts_avg")
    return float(value) if isinstance(value, (int, float)) and not math.isnan(value) else None


def default_model(experiments: Sequence[Experiment]) -> str | None:
    """The model to rank by when none is named: the first whose STS average differs
    between the experiments that have scores (what the grid changed), else the first
    trained model."""
    experiments = [e for e in experiments if e.scored]
    models = trained_models(experiments)
    for model in models:
        if len({sts_avg(e, model) for e in experiments if sts_avg(e, model) is not None}) > 1:
            return model
    return models[0] if models else None


def rank(experiments: Sequence[Experiment], model: str) -> tuple[list[Experiment], list[Experiment]]:
    """Those that ran to the end with an STS average for ``model``, best first; and the
    others (no score, or queued, running, failed), in order."""
    scored = [e for e in experiments if e.scored and sts_avg(e, model) is not None]
    return sorted(scored, key=lambda e: -sts_avg(e, model)), [e for e in experiments if e not in scored]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def reference_name(experiments: Iterable[Experiment]) -> str | None:
    """The row the experiments' leaderboards compared against (``leaderboard.reference``),
    when they all name the same one; None otherwise (the column is then ``vs ref`` and the
    parameter's column, which differs between them, names each one's)."""
    names = {value for e in experiments for key, value in e.params.items()
             if key.endswith(":leaderboard.reference") and value}
    return str(next(iter(names))) if len(names) == 1 else None


def ranking_table(experiments: Sequence[Experiment], model: str) -> str:
    """The ranked table (module docstring): ``model``'s STS average, its difference to
    the baseline with its p-value, its difference to the reference row with its p-value
    (``leaderboard.reference``; columns shown only when a run has one), examples seen,
    training seconds, and the parameters that differ between the experiments."""
    ranked, unranked = rank(experiments, model)
    params = changed_params(experiments)
    names = short_names(params)
    # The model is named once, in the title line main() prints: a long method name
    # (simcse_decorrelation) in every header would cost the table its 120 columns.
    # Against leaderboard.reference (summary keys vs_ref, p_ref), when any ranked run has it.
    with_reference = any("vs_ref" in (e.summary.get(model) or {}) for e in ranked)
    reference = reference_name(experiments) if with_reference else None
    comparison = [f"vs {reference}" if reference else "vs ref", "p ref"] if with_reference else []
    header = ["rank", "experiment", "STS avg", "vs base", "p", *comparison, "examples", "seconds", *names.values()]
    rows = []
    for position, experiment in enumerate([*ranked, *unranked], start=1):
        scored = position <= len(ranked)
        # An unranked run's summary is not its own (module docstring): none of it is shown.
        scores = (experiment.summary.get(model) or {}) if scored else {}
        difference = scores.get("vs_base")
        rows.append([
            str(position) if scored else "-",
            f"{experiment.name} ({experiment.rev})" if experiment.rev and experiment.rev != experiment.name
            else experiment.name,
            # The summary marks a score whose code or parameters changed since it was made.
            (_cell(scores.get("sts_avg")) + (" (stale)" if scores.get("stale") else "")) if scored
            else experiment.state,
            "-" if difference is None else f"{difference:+.2f}",
            "-" if scores.get("p") is None else f"{scores['p']:.3f}",
            *((["-" if scores.get("vs_ref") is None else f"{scores['vs_ref']:+.2f}",
                "-" if scores.get("p_ref") is None else f"{scores['p_ref']:.3f}"]) if with_reference else []),
            _cell(scores.get("examples")),
            _cell(scores.get("seconds")),
            *(_cell(experiment.params.get(key)) for key in params),
        ])
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    left = {1}  # the experiment's name; numbers and states right-aligned

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), *map(line, rows)])


def dvc_exp_show(extra: Sequence[str] = ()) -> list:
    """``dvc exp show --json`` run in the working directory, parsed."""
    command = [sys.executable, "-m", "dvc", "exp", "show", "--json", *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`dvc exp show --json` failed (exit {done.returncode}): {done.stderr.strip()}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as error:
        raise RuntimeError(f"`dvc exp show --json` printed no JSON ({error}): {done.stdout[:200]!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="contrastive-sentence-embeddings experiments",
        description="Rank DVC experiments (dvc exp show) by a model's STS average in "
                    f"{SUMMARY_FILE}, with the parameters that differ between them.")
    parser.add_argument("--method", help="the method (its entry in the summary) to rank by, e.g. simcse; default: "
                                         "the first whose STS average differs between the experiments")
    parser.add_argument("-A", "--all-commits", action="store_true",
                        help="the experiments of every commit, not only of the current one (dvc exp show -A)")
    parser.add_argument("--json", metavar="FILE", help="read a saved `dvc exp show --json` output instead of running DVC")
    args = parser.parse_args(argv)
    try:
        if args.json:
            with open(args.json, encoding="utf-8") as handle:
                show = json.load(handle)
        else:
            show = dvc_exp_show(["-A"] if args.all_commits else [])
        experiments = read_experiments(show)
    except (OSError, RuntimeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    model = args.method or default_model(experiments)
    if model is None:
        print(f"no experiment has a summary ({SUMMARY_FILE}): run one, e.g. `dvc exp run`, or queue a grid "
              "with `dvc exp run --queue -S ...` and `dvc queue start`", file=sys.stderr)
        return 1
    known = trained_models(experiments)
    if model not in known:
        print(f"error: no experiment's summary has {model!r}; it has: {', '.join(known)}", file=sys.stderr)
        return 1
    print(f"{len(experiments)} experiment(s), ranked by {model}'s STS avg ({SUMMARY_FILE}):")
    print(ranking_table(experiments, model))
    failed = [e for e in experiments if e.state == "failed"]
    for experiment in failed:
        print(f"{experiment.name} failed: {experiment.error}")
    if failed:
        print("(the whole log of a failed run: `dvc queue logs <experiment>`; "
              "`dvc queue remove --failed` removes them)")
    if all(experiment.state == "commit" for experiment in experiments):
        print("(no DVC experiment yet, only the commit's results: queue a grid with `dvc exp run --queue -S ...` "
              "and run it with `dvc queue start`)", file=sys.stderr)
    return 0
