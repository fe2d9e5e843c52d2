"""Contrastive Sentence Embeddings file for ensuring the package is executable
as `contrastive-sentence-embeddings` and `python -m contrastive_sentence_embeddings`
(= `kedro run`, with the same options), and
`contrastive-sentence-embeddings experiments`: DVC's experiments ranked by STS avg
(:mod:`contrastive_sentence_embeddings.records.experiments`), and
`contrastive-sentence-embeddings publish <folder> --repo-id <user>/<name>`: a trained
model and its card pushed to the Hugging Face Hub
(:mod:`contrastive_sentence_embeddings.publishing.hub`).
"""
import sys
from pathlib import Path
from typing import Any


def main(*args, **kwargs) -> Any:
    argv = list(args[0]) if args and args[0] is not None else sys.argv[1:]
    if argv[:1] == ["experiments"]:
        # Before Kedro is imported: importing it sets up (and announces) its logging.
        from contrastive_sentence_embeddings.records.experiments import main as rank_experiments

        sys.exit(rank_experiments(argv[1:]))
    if argv[:1] == ["publish"]:
        from contrastive_sentence_embeddings.publishing.hub import main as publish

        sys.exit(publish(argv[1:]))

    from kedro.framework.cli.utils import find_run_command
    from kedro.framework.project import configure_project

    package_name = Path(__file__).parent.name
    configure_project(package_name)

    interactive = hasattr(sys, 'ps1')
    kwargs["standalone_mode"] = not interactive

    run = find_run_command(package_name)
    return run(*args, **kwargs)


if __name__ == "__main__":
    main()
