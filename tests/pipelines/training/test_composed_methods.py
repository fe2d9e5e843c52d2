"""New methods from parameters alone (docs/objectives.md): DeCLUTR + DCL, SimCSE +
decorrelation and SCD + off-dropout negatives (shipped in conf/base; here each block is
given again, tiny, as a user adds one to conf/local), each with a
preset ``kind`` and extra ``views``/``objective``, trained a few steps through one real
``kedro run`` of their three pipelines with a tiny random encoder: each reaches the
leaderboard, its added term is in its training curve, and its model records what was
added to the preset."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.helpers import ScratchProject, base_parameters

pytestmark = pytest.mark.integration

ADDED_TERM = {"declutr_dcl": "dcl", "simcse_decorrelation": "decorrelation", "scd_offdrop": "off_dropout_info_nce"}
PRESET_TERMS = {"declutr_dcl": ["nt_xent", "mlm"], "simcse_decorrelation": ["info_nce"],
                "scd_offdrop": ["self_contrast", "decorrelation"]}


def composed_blocks() -> dict:
    short = {"max_steps": 3, "eval_every": 3, "log_every": 1}
    simcse = base_parameters("simcse", batch_size=16, checkpoint_dir="data/07_model_output/checkpoints/sd", **short)
    simcse.update(seeds=None, objective=[{"term": "decorrelation", "weight": 0.005225, "off_diagonal_weight": 0.012,
                                          "projector_widths": [64, 64]}])
    scd = base_parameters("scd", batch_size=16, checkpoint_dir="data/07_model_output/checkpoints/so", **short)
    scd["method"] = {**scd["method"], "projector_widths": [64, 64]}
    scd.update(views=["off_dropout"], objective=[{"term": "off_dropout_info_nce", "weight": 1.0, "m": 0.9,
                                                  "temperature": 0.05}])
    # 112 documents in batches of 40: 2 steps an epoch
    declutr = base_parameters("declutr", batch_size=40, epochs=2, checkpoint_dir="data/07_model_output/checkpoints/dd",
                              **short)
    declutr.update(seeds=None, objective=[{"term": "dcl", "weight": 0.1, "temperature": 5.0}])
    return {"simcse_decorrelation": simcse, "scd_offdrop": scd, "declutr_dcl": declutr}


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir, tiny_bert_dir):
    from contrastive_sentence_embeddings.configuration.loader import project_parameters
    from tests.helpers import PROJECT_ROOT

    blocks = composed_blocks()
    # The three are shipped in conf/base too (the results of record compare them); here
    # their blocks are the tiny ones above, whatever conf/base says.
    methods = list(dict.fromkeys([*project_parameters(PROJECT_ROOT)["methods"], *blocks]))
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir,
                             {"encoder": str(tiny_bert_dir), "methods": methods, **blocks})
    scratch.run(list(blocks))
    yield scratch
    scratch.close()


@pytest.mark.parametrize("name", list(ADDED_TERM))
def test_a_composed_method_trains_logs_its_added_term_and_reaches_the_leaderboard(project, name):
    curve = pd.read_csv(project.root / f"data/08_reporting/training_curves/{name}.csv")
    terms = [*PRESET_TERMS[name], ADDED_TERM[name]]
    assert curve["step"].tolist() == [1, 2, 3]
    assert curve[["loss", *terms]].notna().all().all() and np.isfinite(curve[terms].to_numpy()).all()
    metrics = json.loads((project.root / f"data/08_reporting/metrics/{name}.json").read_text())
    assert np.isfinite(metrics["sts_avg"])
    board = pd.read_csv(project.root / "data/08_reporting/leaderboard.csv")
    assert name in set(board["model"])
    metadata = json.loads((project.root / f"data/06_models/{name}/cse_metadata.json").read_text())
    assert [term["term"] for term in metadata["method_params"]["objective"]] == [ADDED_TERM[name]]
    assert ("views" in metadata["method_params"]) == (name == "scd_offdrop")
