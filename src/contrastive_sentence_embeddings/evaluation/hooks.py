"""The hook of scores: when a run publishes a new model, the files still holding the
replaced model's scores are named, and named again at the end if the run did not
rewrite them."""

from __future__ import annotations

import logging

from kedro.framework.hooks import hook_impl

from contrastive_sentence_embeddings.runs.project_paths import project_relative

logger = logging.getLogger(__name__)


class EarlierScoresHook:
    """When a run's new model is published in ``data/06_models/<run>``, the scores its run
    had (``metrics/<run>.json``, its seed summary, ``metrics_full/<method>.json``, its MTEB
    folder) describe the model it replaced until this run's evaluation rewrites them. If
    the run stops before that (Ctrl-C, an OOM kill, a job's time limit) or does not
    evaluate (``--tags=training``), those files would pass for the new model's scores.
    At the save this hook names them (a warning when the run does not write them again,
    else an info line: if the run dies, the line is already in the log), and at the end of
    the run, or when it fails, it warns about those still not rewritten, with the command
    that scores the new model. It deletes nothing: the files stay for what they are, and
    the leaderboard marks their rows stale ("scores of an earlier model"), comparing
    fingerprints (``encoders/fingerprint.py``)."""

    def __init__(self) -> None:
        self._catalog = None
        self._writes: set[str] = set()
        self._outdated: dict[str, tuple[str, str]] = {}  # data set -> (its path, the run whose model changed)

    @hook_impl
    def after_catalog_created(self, catalog) -> None:
        self._catalog = catalog

    @hook_impl
    def before_pipeline_run(self, pipeline) -> None:
        self._writes, self._outdated = set(pipeline.all_outputs()), {}

    @hook_impl
    def after_dataset_saved(self, dataset_name: str) -> None:
        self._outdated.pop(dataset_name, None)
        if not dataset_name.endswith(".model") or self._catalog is None:
            return
        folder = getattr(self._catalog.get(dataset_name), "filepath", None)
        if folder is None:  # not the project's model data set
            return
        from contrastive_sentence_embeddings.encoders.fingerprint import model_fingerprint

        run = dataset_name.removesuffix(".model")
        outdated = self._scores_of_other_models(run, model_fingerprint(str(folder)))
        if not outdated:
            return
        self._outdated.update({name: (path, run) for name, path in outdated.items()})
        rewritten = all(name in self._writes for name in outdated)
        logger.log(logging.INFO if rewritten else logging.WARNING,
                   "%s now holds a newly trained model: %s still hold the scores of the model it replaced (the "
                   "leaderboard marks them stale: scores of an earlier model); %s",
                   project_relative(folder), ", ".join(outdated.values()),
                   "this run's evaluation rewrites them next" if rewritten
                   else f"run {_scoring_commands(run, outdated)} to score the new model")

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._warn_if_outdated()

    @hook_impl
    def on_pipeline_error(self) -> None:
        self._warn_if_outdated()

    def _scores_of_other_models(self, run: str, fingerprint: str) -> dict[str, str]:
        """``{data set: path}`` of the files holding ``run``'s scores of another model."""
        from contrastive_sentence_embeddings.evaluation.leaderboard import method_block
        from contrastive_sentence_embeddings.evaluation.mteb_results import REPORT_FILE
        from contrastive_sentence_embeddings.encoders.fingerprint import scores_of_other_models

        method = method_block(run)
        names = dict.fromkeys([f"{run}.metrics", f"{method}.metrics", f"{method}.metrics_full", f"{run}.mteb_results"])
        records, paths = {}, {}
        for name in names:
            dataset = self._catalog.get(name)
            if dataset is None or not dataset.exists():
                continue
            try:
                record = dataset.load()
            except Exception:  # noqa: BLE001 - an unreadable file is the leaderboard's to report
                continue
            records[name] = record.get(REPORT_FILE) if name.endswith(".mteb_results") else record
            # (JSON data sets keep their file in _filepath; the MTEB data set names its folder `path`)
            paths[name] = project_relative(getattr(dataset, "_filepath", None) or getattr(dataset, "path", name))
        return {name: paths[name] for name in scores_of_other_models(records, run, fingerprint)}

    def _warn_if_outdated(self) -> None:
        runs = dict.fromkeys(run for _, run in self._outdated.values())
        for run in runs:
            outdated = {name: path for name, (path, owner) in self._outdated.items() if owner == run}
            logger.warning("This run replaced the model of %s but did not score it again: %s still hold the "
                           "previous model's scores (the leaderboard marks them stale); score the new model with %s",
                           run, ", ".join(outdated.values()), _scoring_commands(run, outdated))
        self._outdated = {}


def _scoring_commands(run: str, data_sets) -> str:
    """The commands that rewrite ``run``'s ``data_sets`` (its STS scores, and the transfer
    scores when ``<method>.metrics_full`` is among them), each in backquotes."""
    from contrastive_sentence_embeddings.evaluation.leaderboard import evaluation_command

    scopes = ["transfer"] if all(name.endswith(".metrics_full") for name in data_sets) else ["sts"]
    if "transfer" not in scopes and any(name.endswith(".metrics_full") for name in data_sets):
        scopes.append("transfer")
    return " and ".join(f"`{evaluation_command(run, scope)}`" for scope in scopes)
