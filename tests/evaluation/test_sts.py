import numpy as np
import pytest

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import BadInputError, StepReport
from contrastive_sentence_embeddings.evaluation import sts


def test_all_and_wmean_by_hand():
    predicted = [np.array([1.0, 2, 3]), np.array([1.0, 2])]
    gold = [np.array([1.0, 2, 3]), np.array([2.0, 1])]
    # wmean: (3 * 100 + 2 * -100) / 5
    assert sts.aggregate_wmean(predicted, gold) == pytest.approx(20.0)
    # all: ranks of [1,2,3,1,2] are [1.5,3.5,5,1.5,3.5], of [1,2,3,2,1] are
    # [1.5,3.5,5,3.5,1.5]; their Pearson correlation is 5 / 9.
    assert sts.aggregate_all(predicted, gold) == pytest.approx(100 * 5 / 9)


def test_unscored_pairs_are_dropped_and_counted(write_file):
    inputs = write_file("STS.input.x.txt", "a\tb\nc\td\ne\tf\ng h\n")
    gold = write_file("STS.gs.x.txt", "4.2\n\n1\n3\n")
    report = StepReport("sts")
    subset = sts.read_sts_subset(inputs, gold, "STS16", "x", report)
    assert subset.sentence1 == ["a", "e"] and subset.sentence2 == ["b", "f"]
    assert subset.scores.tolist() == [4.2, 1.0]
    assert report.dropped == {"unscored pair": 1, "expected 2 tab-separated sentences, found 1 fields": 1}
    assert report.examples["unscored pair"] == [f"{gold.label}:2"]


def test_misaligned_files_are_an_error_naming_both(write_file):
    inputs = write_file("STS.input.x.txt", "a\tb\nc\td\n")
    gold = write_file("STS.gs.x.txt", "4.2\n")
    with pytest.raises(BadInputError, match=r"STS\.input\.x\.txt has 2 lines but .*STS\.gs\.x\.txt has 1"):
        sts.read_sts_subset(inputs, gold, "STS12", "x", StepReport("sts"))


def test_real_sts12_to_16_keep_exactly_the_scored_pairs(mirror_dir):
    folder = mirror_dir / "sts"
    partitions = {
        p.relative_to(folder).as_posix(): (lambda p=p: RawFile(p)) for p in folder.rglob("*") if p.is_file()
    }
    report = StepReport("sts")
    years = sts.read_sts_years(partitions, report)
    assert sorted(years) == list(sts.STS_YEARS)
    assert "SMT" not in {s.subset for s in years["STS13"]}
    for year, subsets in years.items():
        scored = sum(
            sum(1 for line in (folder / f"{year}-en-test/STS.gs.{s.subset}.txt").read_text().splitlines() if line.strip())
            for s in subsets
        )
        assert sum(map(len, subsets)) == scored, year
        for subset in subsets:
            assert len(subset.sentence1) == len(subset.sentence2) == len(subset.scores)
            assert ((subset.scores >= 0) & (subset.scores <= 5)).all()
    assert report.dropped.get("unscored pair", 0) > 0  # STS16's gold files have empty lines
