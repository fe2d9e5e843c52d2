"""The synthetic corpus of ``benchmarks/data_scale.py`` (the generator only; the
benchmark itself is run by hand, see docs/record/data_scale.md)."""

import importlib.util
import sys
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.data.raw_sources import RAW_SOURCES

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "data_scale.py"


@pytest.fixture(scope="module")
def data_scale():
    spec = importlib.util.spec_from_file_location("data_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture(scope="module")
def source_mirror(tmp_path_factory):
    """A tiny mirror with the two inputs the generator recombines: WikiText articles
    (tokenised, with headings and <unk>) and one-sentence-per-line Wikipedia text."""
    root = tmp_path_factory.mktemp("source-mirror")
    article = []
    for section in range(40):
        article += [f" = = Section {section} = = ", ""]
        article += [
            f" The river number {section} @-@ {i} flows , in <unk> years , past {i} @,@ 000 towns . "
            f"It is {i} @.@ 5 km long ( about {i} miles ) . Fish live there ."
            for i in range(20)
        ]
    (root / "longdocs").mkdir()
    (root / "longdocs" / "wikitext-2.valid.txt").write_text(" = Rivers = \n\n" + "\n".join(article) + "\n")
    (root / "wiki").mkdir()
    (root / "wiki" / "wiki1m_head.txt").write_text(
        "\n".join(f"Sentence {i} of the sample has several plain words in it." for i in range(300)) + "\n"
    )
    return root


def test_documents_have_the_requested_word_counts(data_scale, source_mirror):
    pool = data_scale.wikipedia_sentences(source_mirror)
    documents = list(data_scale.synthetic_documents(pool, 30, seed=1, words=(300, 500)))
    assert len(documents) == 30
    lengths = [len(document.split()) for document in documents]
    assert all(300 <= n <= 500 for n in lengths)
    assert len(set(lengths)) > 1  # drawn, not fixed
    assert all("\n" not in document for document in documents)


def test_wikitext_markup_is_undone(data_scale, source_mirror):
    text = " ".join(data_scale.wikipedia_sentences(source_mirror))
    for markup in ("@-@", "@,@", "@.@", "<unk>", " ,", " .", "= ="):
        assert markup not in text
    assert "1,000 towns" in text and "3.5 km" in text


def test_same_seed_same_corpus_and_a_larger_corpus_extends_it(data_scale, source_mirror):
    pool = data_scale.wikipedia_sentences(source_mirror)
    first = list(data_scale.synthetic_documents(pool, 5, seed=7, words=(300, 500)))
    assert first == list(data_scale.synthetic_documents(pool, 5, seed=7, words=(300, 500)))
    assert first == list(data_scale.synthetic_documents(pool, 8, seed=7, words=(300, 500)))[:5]
    assert first != list(data_scale.synthetic_documents(pool, 5, seed=8, words=(300, 500)))
    sentences = list(data_scale.synthetic_sentences(pool, 50, seed=7))
    assert sentences == list(data_scale.synthetic_sentences(pool, 50, seed=7))
    assert sentences != list(data_scale.synthetic_sentences(pool, 50, seed=8))


def test_mirror_layout_is_what_the_raw_data_pipeline_reads(data_scale, source_mirror, tmp_path):
    root = data_scale.write_mirror(tmp_path / "mirror", source_mirror, seed=3, documents=4, sentences=20)
    documents = (root / "openwebtext" / "train.txt").read_text(encoding="utf-8").splitlines()
    assert len(documents) == 4
    assert all(2500 <= len(document.split()) <= 6000 for document in documents)
    sentences = (root / "wiki" / "wiki1m_for_simcse.txt").read_text(encoding="utf-8").splitlines()
    assert len(sentences) == 20 and all(sentence.strip() for sentence in sentences)
    assert (root / "longdocs" / "wikitext-2.valid.txt").resolve() == (
        source_mirror / "longdocs" / "wikitext-2.valid.txt"
    ).resolve()
    # in the folders where the raw_data pipeline looks for each source
    for source, expected in (("openwebtext", "train.txt"), ("wiki", "wiki1m_for_simcse.txt"),
                             ("longdocs", "wikitext-2.valid.txt")):
        folder = root / RAW_SOURCES[source].mirror_subdir
        assert sorted(path.name for path in folder.iterdir()) == [expected]

def test_too_little_source_text_is_a_clear_error(data_scale, tmp_path):
    (tmp_path / "longdocs").mkdir()
    with pytest.raises(FileNotFoundError, match="expected WikiText articles"):
        data_scale.wikipedia_sentences(tmp_path)
