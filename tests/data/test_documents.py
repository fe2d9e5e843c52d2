import pandas as pd

from contrastive_sentence_embeddings.data import documents as docs
from contrastive_sentence_embeddings.data.report import StepReport
from contrastive_sentence_embeddings.data.wikipedia import parse_wikitext


def test_wikitext_articles_become_detokenised_documents_with_the_tokenizers_unk(write_file, tokenizer):
    raw = write_file(
        "w.txt",
        " = The <unk> Article = \n First line , here . \n = = Part = = \n A <unk> word . \n",
    )
    articles = parse_wikitext(raw, StepReport("t"))
    table = docs.wikitext_documents(articles, "w.txt", tokenizer.unk_token)
    assert table.to_dict("records") == [
        {
            "doc_id": "w.txt#0",
            "source": f"{raw.label}:1",
            "title": "The [UNK] Article",
            "text": "First line, here.\nA [UNK] word.",
        }
    ]
    ids = docs.tokenize_documents(table["text"].tolist(), tokenizer)
    assert ids[0].count(tokenizer.unk_token_id) == 1


def test_one_document_per_line_and_empty_documents_are_counted(write_file):
    raw = write_file("owt.txt", "first  document\n\n   \nsecond one\n")
    report = StepReport("t")
    table = docs.line_documents(raw, "owt.txt", report)
    assert table[["doc_id", "text"]].values.tolist() == [["owt.txt:1", "first document"], ["owt.txt:4", "second one"]]
    assert report.dropped == {"empty document": 2}
    assert report.examples["empty document"] == [f"{raw.label}:2", f"{raw.label}:3"]


def test_tokenisation_has_no_special_tokens_and_no_truncation(tokenizer):
    long_text = "word " * 2000
    ids = docs.tokenize_documents(["hello world", long_text], tokenizer, batch_size=1)
    assert ids[0] == tokenizer.convert_tokens_to_ids(["hello", "world"])
    assert len(ids[1]) == 2000 > tokenizer.model_max_length


def test_keep_long_documents_counts_the_short_ones():
    table = pd.DataFrame({"doc_id": ["a", "b", "c"], "source": ["f:1", "f:2", "f:3"], "n_tokens": [10, 2048, 2047]})
    report = StepReport("t")
    kept = docs.keep_long_documents(table, 2048, report)
    assert kept["doc_id"].tolist() == ["b"]
    assert report.dropped == {"fewer than 2048 tokens": 2}
    assert report.examples["fewer than 2048 tokens"] == ["f:1", "f:3"]
