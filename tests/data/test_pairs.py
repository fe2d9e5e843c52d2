import pandas as pd
import pytest

from contrastive_sentence_embeddings.data import pairs
from contrastive_sentence_embeddings.data.report import BadInputError, StepReport


def stsb_line(score, s1="a man is walking .", s2="a person walks ."):
    return f"main-captions\tMSRvid\t2012test\t0001\t{score}\t{s1}\t{s2}"


def test_read_stsb_skips_and_counts_every_kind_of_bad_row(write_file):
    latin1_line = stsb_line("4.2", s1="caf\xe9").encode("latin-1")
    bad_byte = latin1_line.index(b"\xe9")
    raw = write_file(
        "sts-train.csv",
        "\n".join(
            [
                stsb_line("4.5"),
                stsb_line(""),
                stsb_line("high"),
                stsb_line("5.5"),
                "too\tfew\tcolumns",
                "",
                stsb_line("3.0", s2="   "),
                stsb_line("4.0") + "\textra",
            ]
        ).encode()
        + b"\n"
        + latin1_line
        + b"\n",
    )
    report = StepReport("t")
    table = pairs.read_stsb(raw, "train", report)
    # A row with an extra (source) column is read from its first 7 fields, as SentEval does.
    assert table[["sentence1", "sentence2", "score", "split"]].values.tolist() == [
        ["a man is walking .", "a person walks .", 4.5, "train"],
        ["a man is walking .", "a person walks .", 4.0, "train"],
    ]
    assert table["source"].tolist() == [f"{raw.label}:1", f"{raw.label}:8"]
    assert report.rows_in == 9
    assert report.variants == {"extra source columns (8 fields, first 7 read)": 1}
    assert report.dropped == {
        "missing score": 1,
        "score is not a number": 1,
        "score outside 0-5": 1,
        "expected 7 tab-separated columns, found 3": 1,
        "empty line": 1,
        "blank sentence": 1,
        "not utf-8": 1,
    }
    assert report.examples["not utf-8"] == [f"{raw.label}:9 (byte {bad_byte})"]
    assert report.examples["missing score"] == [f"{raw.label}:2"]


def test_read_stsb_strict_mode_names_file_and_line(write_file):
    raw = write_file("sts-dev.csv", stsb_line("4") + "\n" + stsb_line("") + "\n")
    with pytest.raises(BadInputError, match=r"sts-dev\.csv:2: missing score"):
        pairs.read_stsb(raw, "dev", StepReport("t"), on_bad_input="error")


def test_stsb_positive_pairs_are_strictly_above_the_threshold_and_deduplicated():
    table = pd.DataFrame(
        {
            "sentence1": ["a", "b", "c", "D", "e"],
            "sentence2": ["x", "y", "z", "c", "f"],
            "score": [4.0, 4.01, 5.0, 4.5, 3.9],
            "split": ["train"] * 5,
            "source": [f"f:{i}" for i in range(1, 6)],
        }
    )
    table.loc[3, ["sentence1", "sentence2"]] = ["Z", "C"]  # (c, z) again, swapped and upper-cased
    report = StepReport("t")
    kept = pairs.stsb_positive_pairs(table, 4.0, report)
    assert kept["sentence1"].tolist() == ["b", "c"]
    assert report.dropped == {"score <= 4": 2, "duplicate pair": 1}
    assert report.examples["duplicate pair"] == ["f:4"]


def nli_files(write_file, s1, s2, labels, split="dev"):
    return (
        write_file(f"snli/s1.{split}", "".join(f"{x}\n" for x in s1)),
        write_file(f"snli/s2.{split}", "".join(f"{x}\n" for x in s2)),
        write_file(f"snli/labels.{split}", "".join(f"{x}\n" for x in labels)),
    )


def test_senteval_nli_keeps_labels_and_skips_pairs_without_gold_label(write_file):
    files = nli_files(
        write_file,
        ["A dog runs .", "A cat sleeps .", "Kids play .", "Rain falls ."],
        ["An animal moves .", "A cat is awake .", "Children play .", "It is wet ."],
        ["entailment", "contradiction", "-", "happy"],
    )
    report = StepReport("t")
    table = pairs.read_nli_senteval(*files, "snli/dev", report)
    assert table[["premise", "label"]].values.tolist() == [
        ["A dog runs .", "entailment"],
        ["A cat sleeps .", "contradiction"],
    ]
    assert report.rows_in == 4
    assert report.dropped == {"no gold label": 1, "unknown label 'happy'": 1}


def test_senteval_nli_files_of_different_lengths_are_an_error_naming_them(write_file):
    files = nli_files(write_file, ["a", "b"], ["c", "d"], ["entailment"])
    with pytest.raises(BadInputError, match=r"not aligned: s1\.dev has 2 lines, s2\.dev has 2 lines, labels\.dev has 1 lines"):
        pairs.read_nli_senteval(*files, "snli/dev", StepReport("t"))


def test_hub_layout_nli_uses_integer_labels(tmp_path):
    from contrastive_sentence_embeddings.data.raw_file import RawFile

    path = tmp_path / "train.parquet"
    pd.DataFrame(
        {
            "premise": ["p0", "p1", "p2", "p3", "p4"],
            "hypothesis": ["h0", "h1", "h2", "h3", ""],
            "label": [0, 1, 2, -1, 0],
        }
    ).to_parquet(path)
    report = StepReport("t")
    table = pairs.read_nli_hub(RawFile(path), "snli/train", report)
    assert table[["premise", "label"]].values.tolist() == [
        ["p0", "entailment"],
        ["p1", "neutral"],
        ["p2", "contradiction"],
    ]
    assert report.dropped == {"no gold label": 1, "blank sentence": 1}


def test_hub_layout_without_the_nli_columns_is_an_error(tmp_path):
    from contrastive_sentence_embeddings.data.raw_file import RawFile

    path = tmp_path / "train.parquet"
    pd.DataFrame({"sentence1": ["a"], "label": [0]}).to_parquet(path)
    with pytest.raises(BadInputError, match=r"train\.parquet: missing NLI columns \['hypothesis', 'premise'\]"):
        pairs.read_nli_hub(RawFile(path), "train", StepReport("t"))


def test_entailment_pairs_keep_order_sensitive_duplicates_apart():
    table = pd.DataFrame(
        {
            "premise": ["a", "b", "A", "x"],
            "hypothesis": ["b", "a", "B", "y"],
            "label": ["entailment", "entailment", "entailment", "neutral"],
            "split": ["dev"] * 4,
            "source": ["f:1", "f:2", "f:3", "f:4"],
        }
    )
    report = StepReport("t")
    kept = pairs.entailment_pairs([table], report)
    # entailment is directional: (b, a) is a different pair; (A, B) repeats (a, b)
    assert kept[["premise", "hypothesis"]].values.tolist() == [["a", "b"], ["b", "a"]]
    assert report.dropped == {"label neutral (not entailment)": 1, "duplicate pair": 1}
