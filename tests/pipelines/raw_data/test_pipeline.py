import pytest
from kedro.io import DatasetError
from kedro_datasets.partitions import PartitionedDataset

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.raw_sources import RAW_SOURCES, RawDataUnavailable
from contrastive_sentence_embeddings.pipelines.datasets import RawFileDataset
from contrastive_sentence_embeddings.pipelines.raw_data import create_pipeline
from contrastive_sentence_embeddings.pipelines.raw_data.nodes import make_ingest


def raw_folder(path):
    """The catalog's ``raw_{source}`` entry, pointed at ``path``."""
    return PartitionedDataset(
        path=str(path),
        dataset={"type": "contrastive_sentence_embeddings.pipelines.datasets.RawFileDataset"},
        overwrite=True,
    )


def test_one_ingestion_node_per_raw_source():
    pipeline = create_pipeline()
    assert sorted(n.name for n in pipeline.nodes) == sorted(f"ingest_{s}" for s in RAW_SOURCES)
    assert sorted(pipeline.outputs()) == sorted(f"raw_{s}" for s in RAW_SOURCES)
    assert pipeline.inputs() == {"params:raw_data"}


def test_ingested_files_are_byte_identical_and_stale_files_go(tmp_path):
    mirror = tmp_path / "mirror" / "transfer"
    (mirror / "TREC").mkdir(parents=True)
    latin1 = "caf\xe9 r\xe9sum\xe9\n".encode("latin-1")  # TREC's training file is ISO-8859-1
    (mirror / "TREC" / "train_5500.label").write_bytes(latin1)
    (mirror / "MRPC.txt").write_bytes("\ufeffbom first\n".encode("utf-8"))
    folder = raw_folder(tmp_path / "01_raw" / "transfer")
    (tmp_path / "01_raw" / "transfer").mkdir(parents=True)
    (tmp_path / "01_raw" / "transfer" / "stale.txt").write_text("from an older mirror")

    ingest = make_ingest("transfer")
    folder.save(ingest({"mirror_dir": str(tmp_path / "mirror"), "mode": "mirror"}))

    loaded = {pid: load() for pid, load in folder.load().items()}
    assert sorted(loaded) == ["MRPC.txt", "TREC/train_5500.label"]
    assert all(isinstance(raw, RawFile) for raw in loaded.values())
    assert loaded["TREC/train_5500.label"].read_bytes() == latin1
    assert loaded["TREC/train_5500.label"].path.parent == tmp_path / "01_raw" / "transfer" / "TREC"


def test_ingestion_without_mirror_or_network_fails_with_the_clear_error(tmp_path):
    with pytest.raises(RawDataUnavailable, match="CSE_DATA_MIRROR"):
        make_ingest("openwebtext")({"mirror_dir": str(tmp_path), "mode": "auto"})


def test_a_missing_raw_file_tells_how_to_bring_it_in(tmp_path):
    with pytest.raises(DatasetError, match="kedro run --pipeline=raw_data"):
        RawFileDataset(str(tmp_path / "nothing.txt")).load()


def test_a_source_mode_overrides_the_mode_for_that_source_only(tmp_path, monkeypatch):
    """conf/paper's shape: everything from the Hub except the sources named mirror."""
    import contrastive_sentence_embeddings.data.raw_sources as raw_sources

    (tmp_path / "mirror" / "transfer").mkdir(parents=True)
    (tmp_path / "mirror" / "transfer" / "MR.txt").write_text("a fine film\n")
    (tmp_path / "mirror" / "wiki").mkdir()
    (tmp_path / "mirror" / "wiki" / "head.txt").write_text("a mirror sentence\n")
    asked = []
    monkeypatch.setitem(raw_sources.RAW_SOURCES, "wiki", raw_sources.RawSource(
        "wiki", "wiki", "Wikipedia sentences", lambda dest, options: asked.append(dest)))
    params = {"mirror_dir": str(tmp_path / "mirror"), "mode": "hub", "source_modes": {"transfer": "mirror"}}

    assert sorted(make_ingest("transfer")(params)) == ["MR.txt"]
    make_ingest("wiki")(params)
    assert len(asked) == 1  # hub for wiki although the mirror has it: only transfer is switched


@pytest.mark.parametrize("source_modes, message", [
    ({"transfers": "mirror"}, "unknown raw source"),
    ({"sts": "offline"}, "source_modes.sts must be auto, mirror or hub"),
])
def test_a_wrong_source_mode_is_a_parameter_error(source_modes, message):
    from contrastive_sentence_embeddings.configuration.strict import ParameterError, parse_strict
    from contrastive_sentence_embeddings.data.raw_sources import RawDataConfig

    with pytest.raises(ParameterError, match=message):
        parse_strict(RawDataConfig, {"mode": "hub", "source_modes": source_modes}, "raw_data")
