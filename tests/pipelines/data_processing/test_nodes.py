import pandas as pd
import pytest

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import BadInputError
from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER
from contrastive_sentence_embeddings.pipelines.data_processing import nodes

WIKITEXT = " = An Article = \n Alpha beta gamma delta epsilon . Second sentence is here too . \n = = Sub = = \n Has a <unk> in it , sadly . \n"
LINES = "One sentence per line here.\nAnother sentence per line here.\n\nshort\n"


@pytest.fixture
def raw_inputs(write_file, partitions):
    return {
        "raw_wiki": partitions({"wiki.txt": write_file("wiki/wiki.txt", LINES), "LICENSE": write_file("wiki/LICENSE", "CC")}),
        "raw_longdocs": partitions({"w.txt": write_file("longdocs/w.txt", WIKITEXT)}),
    }


SENTENCE_PARAMS = {"inputs": ["wikitext", "sentence_per_line"], "min_words": 3, "max_words": 20, "drop_unk": True, "n_sentences": 3, "seed": 1}


def test_sentence_candidates_come_from_both_inputs(raw_inputs):
    candidates, report = nodes.collect_sentence_candidates(raw_inputs["raw_wiki"], raw_inputs["raw_longdocs"], SENTENCE_PARAMS, "skip")
    assert list(candidates["sentence"]) == [
        "One sentence per line here.",
        "Another sentence per line here.",
        "",
        "short",
        "Alpha beta gamma delta epsilon.",
        "Second sentence is here too.",
        "Has a <unk> in it, sadly.",
    ]
    counts = report["sentence_candidates"]
    assert counts["rows_in"] == 4 + 4 and counts["rows_out"] == 7
    assert counts["dropped"] == {"article title line": 1, "section heading": 1}


def test_only_the_chosen_sentence_inputs_are_used(raw_inputs):
    params = {**SENTENCE_PARAMS, "inputs": ["sentence_per_line"]}
    candidates, _ = nodes.collect_sentence_candidates(raw_inputs["raw_wiki"], raw_inputs["raw_longdocs"], params, "skip")
    assert len(candidates) == 4
    with pytest.raises(ValueError, match="wiki_sentences.inputs"):
        nodes.collect_sentence_candidates(raw_inputs["raw_wiki"], raw_inputs["raw_longdocs"], {**params, "inputs": ["books"]}, "skip")


def test_no_text_input_at_all_is_a_clear_error(write_file, partitions):
    only_license = partitions({"LICENSE": write_file("wiki/LICENSE", "CC")})
    with pytest.raises(FileNotFoundError, match=r"no \.txt input files for wiki_sentences"):
        nodes.collect_sentence_candidates(only_license, partitions({}), SENTENCE_PARAMS, "skip")
    with pytest.raises(FileNotFoundError, match=r"no \.txt input files for long_documents"):
        nodes.build_long_documents(partitions({}), only_license, {"inputs": ["openwebtext"], "min_doc_tokens": 1}, DEFAULT_ENCODER, "skip")


def test_sample_sentences_filters_then_samples(raw_inputs):
    candidates, _ = nodes.collect_sentence_candidates(raw_inputs["raw_wiki"], raw_inputs["raw_longdocs"], SENTENCE_PARAMS, "skip")
    sample, report = nodes.sample_sentences(candidates, SENTENCE_PARAMS)
    sample = sample.to_pandas()
    counts = report["wiki_sentences"]
    assert len(sample) == 3 and counts["rows_out"] == 3
    assert counts["rows_in"] == counts["rows_out"] + counts["rows_dropped"] == 7
    assert counts["available"] == 4
    assert not sample["sentence"].str.contains("<unk>").any()


def test_the_reports_count_the_rows_each_input_gave(raw_inputs):
    """Each step counts its rows out by input (from the file each row was read from), so
    the model card can tell which data sets reached the training data: here the sample
    of 3 draws from the 4 kept candidates, which come from both inputs."""
    candidates, report = nodes.collect_sentence_candidates(raw_inputs["raw_wiki"], raw_inputs["raw_longdocs"],
                                                           SENTENCE_PARAMS, "skip")
    files = {"sentence_per_line": raw_inputs["raw_wiki"]["wiki.txt"]().label,
             "wikitext": raw_inputs["raw_longdocs"]["w.txt"]().label}
    by_file = candidates.to_pandas()["source"].str.rsplit(":", n=1).str[0].value_counts().to_dict()
    assert report["sentence_candidates"]["rows_out_by_input"] == {name: by_file[f] for name, f in files.items()}
    sample, sampled = nodes.sample_sentences(candidates, SENTENCE_PARAMS, None, raw_inputs["raw_wiki"],
                                             raw_inputs["raw_longdocs"])
    drawn = sample.to_pandas()["source"].str.rsplit(":", n=1).str[0].value_counts().to_dict()
    expected = {name: drawn.get(f, 0) for name, f in files.items()}
    assert sampled["wiki_sentences"]["rows_out_by_input"] == expected and sum(expected.values()) == 3
    # Without the raw inputs (which name the files), no per-input counts.
    assert "rows_out_by_input" not in nodes.sample_sentences(candidates, SENTENCE_PARAMS)[1]["wiki_sentences"]


def test_long_documents_count_what_each_input_kept(mirror_dir):
    """The mirror's OpenWebText samples are all shorter than 1,024 tokens: read, but none
    kept, which the report says (and the model card then does not name OpenWebText)."""
    from contrastive_sentence_embeddings.data.raw_file import folder_partitions

    longdocs, owt = folder_partitions(mirror_dir / "longdocs"), folder_partitions(mirror_dir / "openwebtext")
    counts = {}
    for minimum in (1024, 64):
        kept, report = nodes.build_long_documents(longdocs, owt, {"inputs": ["wikitext", "openwebtext"],
                                                                  "min_doc_tokens": minimum}, DEFAULT_ENCODER, "skip")
        from_owt = int(kept.to_pandas()["source"].str.contains("/openwebtext/").sum())
        counts[minimum] = report["long_documents"]["rows_out_by_input"]
        assert counts[minimum] == {"wikitext": len(kept) - from_owt, "openwebtext": from_owt}
    assert counts[1024]["openwebtext"] == 0 < counts[1024]["wikitext"]
    assert counts[64]["openwebtext"] > 0


def test_rows_from_a_file_of_no_input_are_an_error():
    from contrastive_sentence_embeddings.data.report import rows_by_input

    assert rows_by_input(["a.txt:1", "a.txt:20", "b.txt:3"], {"x": ["a.txt"], "y": ["b.txt"], "z": []}) == {
        "x": 2, "y": 1, "z": 0}
    with pytest.raises(ValueError, match="rows from c.txt, which none of the inputs"):
        rows_by_input(["c.txt:1"], {"x": ["a.txt"]})


def test_long_documents_are_tokenised_and_filtered(write_file, partitions):
    owt = write_file("owt/a.txt", ("word " * 50 + "\n") + "\n" + ("word " * 5 + "\n"))
    params = {"inputs": ["openwebtext"], "min_doc_tokens": 40}
    kept, report = nodes.build_long_documents(partitions({}), partitions({"a.txt": owt}), params, DEFAULT_ENCODER, "skip")
    assert kept.features["input_ids"].feature.dtype == "int32" and "text" not in kept.column_names
    kept = kept.to_pandas()
    assert kept["doc_id"].tolist() == ["a.txt:1"]
    assert kept["n_tokens"].tolist() == [50] and len(kept["input_ids"][0]) == 50
    counts = report["long_documents"]
    assert counts["rows_in"] == 3 and counts["rows_out"] == 1
    assert counts["dropped"] == {"empty document": 1, "fewer than 40 tokens": 1}


def test_declutr_spans_node_reads_its_parameters():
    documents = pd.DataFrame({"doc_id": ["a", "b"], "n_tokens": [1000, 50]})
    params = {"num_anchors": 2, "num_positives": 3, "min_length": 10, "max_length": 100, "anchor_gap": 100, "epochs": 2, "seed": 0}
    spans, report = nodes.sample_declutr_spans(documents, params)
    spans = spans.to_pandas()
    assert len(spans) == 2 * 2  # doc a, 2 anchors, 2 epochs; doc b is too short
    assert spans["positive_starts"].map(len).eq(3).all()
    assert report["declutr_spans"]["dropped"] == {"document too short for the sampled spans": 2}


def stsb(score, s1="a b c", s2="d e f"):
    return f"g\tf\t2012\t1\t{score}\t{s1}\t{s2}\n"


def test_stsb_pairs_use_the_chosen_splits(write_file, partitions):
    raw_sts = partitions(
        {
            "STSBenchmark/sts-train.csv": write_file("sts/STSBenchmark/sts-train.csv", stsb(4.5) + stsb(3) + stsb("")),
            "STSBenchmark/sts-dev.csv": write_file("sts/STSBenchmark/sts-dev.csv", stsb(5, "x", "y")),
            "STS12-en-test/STS.gs.MSRpar.txt": write_file("sts/STS12/gs.txt", "4.5\n"),
        }
    )
    pairs, report = nodes.extract_stsb_pairs(raw_sts, {"splits": ["train", "dev"], "min_score": 4.0}, "skip")
    pairs = pairs.to_pandas()
    assert pairs[["sentence1", "split"]].values.tolist() == [["a b c", "train"], ["x", "dev"]]
    assert report["stsb_pairs"]["dropped"] == {"missing score": 1, "score <= 4": 1}
    with pytest.raises(BadInputError, match=r"sts-train\.csv:3: missing score"):
        nodes.extract_stsb_pairs(raw_sts, {"splits": ["train"], "min_score": 4.0}, "error")
    with pytest.raises(FileNotFoundError, match=r"\['test'\] not found"):
        nodes.extract_stsb_pairs(raw_sts, {"splits": ["test"], "min_score": 4.0}, "skip")


def test_nli_pairs_from_both_layouts_and_split_choice(write_file, partitions, tmp_path):
    hub = tmp_path / "nli" / "multinli" / "train.parquet"
    hub.parent.mkdir(parents=True)
    pd.DataFrame({"premise": ["P1", "P2"], "hypothesis": ["H1", "H2"], "label": [0, 2]}).to_parquet(hub)
    files = {
        "snli/s1.dev": write_file("nli/snli/s1.dev", "A .\nB .\n"),
        "snli/s2.dev": write_file("nli/snli/s2.dev", "a .\nb .\n"),
        "snli/labels.dev": write_file("nli/snli/labels.dev", "entailment\nneutral\n"),
        "multinli/train.parquet": RawFile(hub),
    }
    pairs, report = nodes.extract_nli_pairs(partitions(files), {"splits": None}, "skip")
    pairs = pairs.to_pandas()
    assert pairs[["premise", "hypothesis", "split"]].values.tolist() == [["P1", "H1", "multinli/train"], ["A .", "a .", "snli/dev"]]
    assert report["nli_pairs"]["rows_in"] == 4
    only_dev, _ = nodes.extract_nli_pairs(partitions(files), {"splits": ["dev"]}, "skip")
    assert only_dev.column("split").to_pylist() == ["snli/dev"]
    without_s2 = {k: v for k, v in files.items() if k != "snli/s2.dev"}
    with pytest.raises(FileNotFoundError, match=r"snli/dev.*: snli/s2\.dev missing"):
        nodes.extract_nli_pairs(partitions(without_s2), {"splits": ["dev"]}, "skip")
    with pytest.raises(FileNotFoundError, match="no NLI files"):
        nodes.extract_nli_pairs(partitions(files), {"splits": ["test"]}, "skip")


SPAN_PARAMS = {"num_anchors": 2, "num_positives": 2, "min_length": 8, "max_length": 32, "anchor_gap": 32, "epochs": 2,
               "seed": 5}


@pytest.fixture
def long_documents(write_file, partitions):
    """Real WikiText articles and generated one-document-per-line documents, built by the node."""
    lines = "".join(" ".join(f"w{(i * j) % 50}" for j in range(20 + 7 * i)) + "\n" for i in range(40))
    owt = write_file("owt/a.txt", lines + "\n" + "tiny\n")
    kept, report = nodes.build_long_documents(partitions({}), partitions({"a.txt": owt}),
                                              {"inputs": ["openwebtext"], "min_doc_tokens": 100}, DEFAULT_ENCODER,
                                              "skip", 2)
    return kept, report["long_documents"]


def test_shard_count_changes_nothing_downstream(long_documents, tmp_path, tokenizer):
    """The same documents saved in many small shards or in one load back to the same
    spans and the same token ids for the trainer."""
    from contrastive_sentence_embeddings.pipelines.datasets import ArrowDataset
    from contrastive_sentence_embeddings.training.declutr import spans_by_document, training_documents

    kept, report = long_documents
    assert report["rows_in"] == 42 == report["rows_out"] + report["rows_dropped"] and report["rows_out"] == len(kept)
    assert set(report["dropped"]) == {"empty document", "fewer than 100 tokens"}
    many, one = ArrowDataset(str(tmp_path / "many"), max_shard_size=4_000), ArrowDataset(str(tmp_path / "one"))
    many.save(kept)
    one.save(kept)
    assert len(list((tmp_path / "many").glob("*.arrow"))) > 3 and len(list((tmp_path / "one").glob("*.arrow"))) == 1
    loaded_many, loaded_one = many.load(), one.load()
    spans_many, report_many = nodes.sample_declutr_spans(loaded_many, SPAN_PARAMS, 1)
    spans_one, report_one = nodes.sample_declutr_spans(loaded_one, SPAN_PARAMS, 2)
    assert spans_many.equals(spans_one) and report_many == report_one
    spans = spans_by_document(spans_one)
    tokens_many = training_documents(loaded_many, spans, len(tokenizer))
    tokens_one = training_documents(loaded_one, spans, len(tokenizer))
    assert sorted(tokens_many) == sorted(tokens_one) and len(tokens_one) > 0
    for doc_id in tokens_one:
        assert tokens_many[doc_id].tolist() == tokens_one[doc_id].tolist()


def test_sentences_are_the_same_whatever_the_number_of_workers(mirror_dir):
    """Real WikiText paragraphs and wiki1m lines, split and filtered on one and on two
    worker processes: the same candidates, sentences and reports, row for row."""
    raw_wiki = {"wiki1m_head.txt": lambda: RawFile(mirror_dir / "wiki/wiki1m_head.txt")}
    raw_longdocs = {"wikitext-2.valid.txt": lambda: RawFile(mirror_dir / "longdocs/wikitext-2.valid.txt")}
    params = {**SENTENCE_PARAMS, "min_words": 5, "max_words": 64, "n_sentences": 2000, "seed": 42}
    runs = {}
    for workers in (1, 2):
        candidates, candidate_report = nodes.collect_sentence_candidates(raw_wiki, raw_longdocs, params, "skip", workers)
        sample, sample_report = nodes.sample_sentences(candidates, params, workers)
        # the work really was shared out: one Arrow shard per worker
        assert len({entry["filename"] for entry in candidates.cache_files}) == workers
        runs[workers] = (candidates.to_pandas(), candidate_report, sample.to_pandas(), sample_report)
    (candidates1, report1, sample1, sampled1), (candidates2, report2, sample2, sampled2) = runs[1], runs[2]
    assert len(candidates1) > 15_000 and candidates1.equals(candidates2) and report1 == report2
    assert len(sample1) == 2000 and sample1.equals(sample2) and sampled1 == sampled2
    assert sampled1["wiki_sentences"]["dropped"]["duplicate"] > 0  # de-duplication took part
