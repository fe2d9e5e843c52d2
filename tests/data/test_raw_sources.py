import pandas as pd
import pytest

from contrastive_sentence_embeddings.data import raw_sources
from contrastive_sentence_embeddings.data.pairs import read_stsb
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.raw_sources import (
    RawDataUnavailable,
    materialise_raw_source,
    resolve_mirror_dir,
)
from contrastive_sentence_embeddings.data.report import StepReport


@pytest.fixture
def tiny_mirror(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "nli" / "snli").mkdir(parents=True)
    (mirror / "nli" / "snli" / "s1.dev").write_text("a\n")
    (mirror / "nli" / "snli" / "labels.dev").write_text("entailment\n")
    (mirror / "nli" / ".hidden").write_text("editor swap file")
    return mirror


def test_mirror_files_are_listed_by_relative_path(tiny_mirror):
    files = materialise_raw_source("nli", mirror_dir=str(tiny_mirror), mode="mirror")
    assert sorted(files) == ["snli/labels.dev", "snli/s1.dev"]
    assert files["snli/s1.dev"].path == tiny_mirror / "nli" / "snli" / "s1.dev"


def test_mirror_location_comes_from_the_parameter_then_the_environment(tiny_mirror, monkeypatch, tmp_path):
    monkeypatch.setenv(raw_sources.MIRROR_ENV_VAR, str(tiny_mirror))
    assert resolve_mirror_dir() == tiny_mirror
    assert resolve_mirror_dir(str(tmp_path)) == tmp_path
    monkeypatch.delenv(raw_sources.MIRROR_ENV_VAR)
    monkeypatch.chdir(tmp_path)
    assert resolve_mirror_dir() == (tmp_path / raw_sources.DEFAULT_MIRROR_DIR).resolve()


def test_no_mirror_and_no_network_is_one_clear_error(tmp_path):
    # conftest sets HF_HUB_OFFLINE=1, as on a machine without internet.
    with pytest.raises(RawDataUnavailable) as caught:
        materialise_raw_source("wiki", mirror_dir=str(tmp_path / "nowhere"), staging_dir=tmp_path / "stage")
    message = str(caught.value)
    assert "Raw source 'wiki'" in message
    assert str(tmp_path / "nowhere" / "wiki") in message
    assert "downloading it from the Hub failed" in message
    assert raw_sources.MIRROR_ENV_VAR in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_mirror_mode_does_not_fall_back_to_the_hub(tmp_path):
    with pytest.raises(RawDataUnavailable, match="is not in the offline mirror"):
        materialise_raw_source("longdocs", mirror_dir=str(tmp_path), mode="mirror")


def test_a_source_without_a_hub_copy_says_where_to_get_it(tmp_path):
    with pytest.raises(RawDataUnavailable, match="get_transfer_data.bash"):
        materialise_raw_source("transfer", mirror_dir=str(tmp_path), mode="auto")


def test_unknown_mode_is_rejected(tiny_mirror):
    with pytest.raises(ValueError, match="mode"):
        materialise_raw_source("nli", mirror_dir=str(tiny_mirror), mode="sometimes")


def test_hub_stsb_rows_are_written_in_the_senteval_layout(tmp_path):
    from contrastive_sentence_embeddings.data.sts_hub import hub_pairs, write_stsb_split

    rows = [
        {"sentence1": "A man\tplays.", "sentence2": "A man is\nplaying.", "score": 4.4},
        {"sentence1": "x y", "sentence2": "z", "score": 0},
    ]
    path = tmp_path / "STSBenchmark" / "sts-train.csv"
    write_stsb_split(path, hub_pairs(rows, "mteb/stsbenchmark-sts")[0], origin="mteb/stsbenchmark-sts")
    report = StepReport("t")
    table = read_stsb(RawFile(path), "train", report, on_bad_input="error")
    assert table[["sentence1", "sentence2", "score"]].values.tolist() == [
        ["A man plays.", "A man is playing.", 4.4],
        ["x y", "z", 0.0],
    ]


def test_one_line_flattens_a_document():
    assert raw_sources.one_line("Title\n\nFirst para.\tTabbed.\r\nLast.") == "Title First para. Tabbed. Last."


def test_every_raw_source_has_a_catalog_entry_and_a_dvc_output():
    import yaml

    from tests.helpers import PROJECT_ROOT

    catalog = yaml.safe_load((PROJECT_ROOT / "conf/base/catalog.yml").read_text())
    stages = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]
    assert catalog["raw_{source}"]["path"] == "data/01_raw/{source}"
    assert stages["raw_data"]["outs"] == [f"data/01_raw/{name}" for name in raw_sources.RAW_SOURCES]
