"""``cse-train``: one method's training as one process of a (multi-node) ``torchrun`` job.

``kedro run`` prepares the data and evaluates; across machines the training in
between is started by ``torchrun`` on every node, each process running this module::

    # on every node (node rank 0 and 1), from the project folder on shared storage
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        --rdzv-id simcse-1 -m contrastive_sentence_embeddings.training.entry --env paper --method simcse.seed42

Every process opens the project with Kedro (``--env``, ``--params`` as ``kedro run``
takes them; the parameters are parsed strictly as always), loads the method's prepared
data and the dev sets from the catalog's files, and trains with the same function as
``kedro run`` (``training.fanout.train_tables``; accelerate's DDP finds the process
group torchrun set up). Rank 0 alone writes: the trainer's checkpoints, then the model
and the training curve through the catalog (``<run>.model``, ``<run>.training_curve``),
exactly where ``kedro run`` would, so ``kedro run --namespaces=<run> --tags=evaluation``
scores it. ``training.num_processes`` is not read here: torchrun decides.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)


def parse_params(text: str | None) -> dict:
    """``--params`` as ``kedro run`` reads it in this project: ``a.b=1,c=[2,3]`` ->
    ``{"a": {"b": 1}, "c": [2, 3]}`` (values typed as YAML would; ``config.parse_params_text``)."""
    from contrastive_sentence_embeddings.configuration.layering import parse_params_text
    from contrastive_sentence_embeddings.configuration.strict import ParameterError

    try:
        return parse_params_text(text)
    except ParameterError as error:
        raise SystemExit(str(error)) from None


def method_run(params: Mapping, run: str) -> tuple[dict, str]:
    """The block of ``run`` (a method of ``methods``, or ``<method>.seed<k>`` for a
    method with ``seeds``; ``config.run_blocks``, as the training node gets it) and its
    data family."""
    from contrastive_sentence_embeddings.configuration.blocks import listed_method_configs, run_blocks
    from contrastive_sentence_embeddings.configuration.strict import ParameterError
    from contrastive_sentence_embeddings.training.method_block import MethodBlock

    blocks = run_blocks(params)
    if run not in blocks:
        raise ParameterError(f"--method {run}: not a training run of this project; choose one of {', '.join(blocks)}")
    method = next(name for name, config in listed_method_configs(params).items() if run in config.run_names(name))
    return blocks[run], MethodBlock.from_params(params[method], method).family


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cse-train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", required=True,
                        help="the run to train: a name in `methods`, or <method>.seed<k> for a method with seeds")
    parser.add_argument("--env", default=None, help="Kedro configuration environment (e.g. paper)")
    parser.add_argument("--params", default=None, help="parameter overrides, as kedro run --params")
    parser.add_argument("--project-path", default=None, help="the Kedro project (default: the working directory)")
    args = parser.parse_args(argv)

    from contrastive_sentence_embeddings.training.fanout import setup_worker, train_tables

    rank = setup_worker()  # before Kedro starts: this process is a training worker, not a whole run
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from contrastive_sentence_embeddings.training.method_block import MethodBlock

    root = Path(args.project_path or os.getcwd()).resolve()
    bootstrap_project(root)
    with KedroSession.create(project_path=root, env=args.env, runtime_params=parse_params(args.params)) as session:
        context = session.load_context()
        if rank != 0:
            logging.getLogger().setLevel(logging.WARNING)
        block, family = method_run(context.params, args.method)
        config = MethodBlock.from_params(block, args.method)  # once: train_tables takes it as it is
        if family not in ("sentences", "documents"):
            raise SystemExit(f"{args.method}: the {family} family is trained by `kedro run`, not cse-train")
        catalog = context.catalog
        tables = {name: catalog.load(dataset) for name, dataset in config.inputs().items()}
        dev_scorer = None
        if rank == 0:  # the trainer scores on the main process alone
            from contrastive_sentence_embeddings.evaluation.sts import STARTING_SCORES_DIR, DevScorer

            dev_scorer = DevScorer(catalog.load("raw_sts"), memo_dir=STARTING_SCORES_DIR)
        trained, result = train_tables(family, tables, context.params["encoder"], config, dev_scorer)
        if rank == 0:
            catalog.save(f"{args.method}.model", trained)
            catalog.save(f"{args.method}.training_curve", result.curve)
            logger.info("%s: model and training curve published; score it with "
                        "`kedro run --namespaces=%s --tags=evaluation`", args.method, args.method)


if __name__ == "__main__":
    main(sys.argv[1:])
