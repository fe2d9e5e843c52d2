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
    monkeypatch.delenv(raw_sources.DVC_ROOT_ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_mirror_dir() == (tmp_path / raw_sources.DEFAULT_MIRROR_DIR).resolve()
    # A queued DVC experiment runs in a copy under .dvc/tmp/exps: relative paths are the repository's.
    copy = tmp_path / "repo" / ".dvc" / "tmp" / "exps" / "tmp1"
    copy.mkdir(parents=True)
    monkeypatch.chdir(copy)
    monkeypatch.setenv(raw_sources.DVC_ROOT_ENV_VAR, str(tmp_path / "repo"))
    assert resolve_mirror_dir() == (tmp_path / "shared" / "datasets").resolve()
    assert resolve_mirror_dir(str(tiny_mirror)) == tiny_mirror


def test_no_mirror_and_no_network_is_one_clear_error(tmp_path):
    # conftest sets HF_HUB_OFFLINE=1, as on a machine without internet.
    with pytest.raises(RawDataUnavailable) as caught:
        materialise_raw_source("wiki", mirror_dir=str(tmp_path / "nowhere"), staging_dir=tmp_path / "stage")
    message = str(caught.value)
    assert "Raw source 'wiki'" in message
    assert "the Hugging Face Hub could not be reached for princeton-nlp/datasets-for-simcse" in message
    assert "HF_HUB_OFFLINE is set" in message
    assert f"it is not in the offline mirror ({tmp_path / 'nowhere' / 'wiki'} is missing or empty)" in message
    assert raw_sources.MIRROR_ENV_VAR in message and "--params raw_data.mode=mirror" in message
    assert "\n" not in message  # the library's error in one line, not its traceback
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_hub_mode_offline_says_the_hub_was_unreachable_not_that_the_mirror_lacks_the_source(
        tmp_path, mirror_dir):
    """``kedro run --env paper`` (raw_data.mode: hub) with no network: the mirror was not
    read, and it has the source; the message says the Hub could not be reached, for
    which data set, the library's error in one line and how to run from the mirror."""
    with pytest.raises(RawDataUnavailable) as caught:
        materialise_raw_source("longdocs", mirror_dir=str(mirror_dir), mode="hub", staging_dir=tmp_path / "stage")
    message = str(caught.value)
    assert message.startswith("Raw source 'longdocs' (WikiText-2 articles): the Hugging Face Hub could not be "
                              "reached for Salesforce/wikitext (")
    assert "OfflineModeIsEnabled" in message or "LocalEntryNotFoundError" in message
    assert "is not in the offline mirror" not in message and "missing or empty" not in message
    assert f"the offline mirror was not read ({mirror_dir / 'longdocs'} holds a sample of it)" in message
    assert "`raw_data.source_modes.longdocs=mirror`" in message and "\n" not in message


@pytest.mark.parametrize("error", [
    ConnectionError("Couldn't reach 'me/data' on the Hub (ConnectError)"),
    OSError("[Errno -2] Name or service not known"),
    TimeoutError("read timed out"),
])
def test_a_connection_failure_is_reported_as_the_hub_unreachable(tmp_path, error, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def fetch(dest, options):
        try:
            raise error
        except OSError as inner:
            if not isinstance(inner, (ConnectionError, TimeoutError)):  # a DNS failure, as requests wraps it
                import requests

                raise requests.exceptions.ConnectionError("Max retries exceeded with url: /api/datasets/me/data\n"
                                                          "  (a second line)") from inner
            raise
    source = raw_sources.RawSource("wiki", "wiki", "a source", fetch)
    with pytest.raises(RawDataUnavailable) as caught:
        raw_sources._fetch_from_hub(source, tmp_path / "no-mirror", {"repo_id": "me/data"}, tmp_path / "stage")
    message = str(caught.value)
    assert "the Hugging Face Hub could not be reached for me/data (" in message
    assert "HF_HUB_OFFLINE" not in message and "\n" not in message and "a second line" not in message


def test_a_refusal_by_the_hub_is_not_called_unreachable(tmp_path):
    def fetch(dest, options):
        raise ValueError("Dataset 'me/missing' doesn't exist on the Hub")

    source = raw_sources.RawSource("wiki", "wiki", "a source", fetch)
    with pytest.raises(RawDataUnavailable) as caught:
        raw_sources._fetch_from_hub(source, tmp_path / "no-mirror", {}, tmp_path / "stage", mode="hub")
    message = str(caught.value)
    assert "could not be reached" not in message
    assert "downloading it from the Hub failed (ValueError: Dataset 'me/missing' doesn't exist on the Hub)" in message
    assert "raw_data.mode is 'hub' for it, so the offline mirror was not read" in message


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
    outs = [next(iter(out)) if isinstance(out, dict) else out for out in stages["raw_data"]["outs"]]
    assert outs == [f"data/01_raw/{name}" for name in raw_sources.RAW_SOURCES]


# --- publishing into data/01_raw: the mirror protected; Hub staging removed ---------------
def test_editing_a_raw_file_published_from_a_writable_mirror_leaves_the_mirror_as_it_was(tmp_path):
    source = tmp_path / "mirror" / "wiki.txt"
    source.parent.mkdir()
    source.write_text("one\ntwo\n")
    source.chmod(0o644)  # writable: a hard link would let an edit of data/01_raw write into it
    target = tmp_path / "project" / "data" / "01_raw" / "wiki" / "wiki.txt"
    assert raw_sources.publish_raw_file(RawFile(source), target) == "copy"
    assert target.read_text() == "one\ntwo\n" and target.stat().st_ino != source.stat().st_ino
    with target.open("a") as editor:  # an edit in place, as `echo >>` or most editors do
        editor.write("three\n")
    target.chmod(0o600)
    assert source.read_text() == "one\ntwo\n" and oct(source.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in target.parent.iterdir()) == ["wiki.txt"]  # no temporary left


def test_a_source_read_only_to_this_user_is_hard_linked_and_a_clone_is_preferred(tmp_path, monkeypatch):
    source = tmp_path / "mirror.txt"
    source.write_text("text\n")
    monkeypatch.setattr(raw_sources, "changeable_by_this_user", lambda path: False)  # another user's file
    linked = tmp_path / "out" / "linked.txt"
    assert raw_sources.publish_raw_file(RawFile(source), linked) == "hard link to a read-only file"
    assert linked.stat().st_ino == source.stat().st_ino
    monkeypatch.setattr(raw_sources, "_reflink", lambda source, target: target.write_bytes(source.read_bytes()) or True)
    assert raw_sources.publish_raw_file(RawFile(source), tmp_path / "out" / "cloned.txt") == "reflink"


def test_changeable_by_this_user_is_true_for_a_writable_file(tmp_path):
    (tmp_path / "mine.txt").write_text("x")
    assert raw_sources.changeable_by_this_user(tmp_path / "mine.txt")


def test_a_large_writable_source_is_linked_with_a_warning_and_a_change_through_the_link_stops_the_next_run(
        tmp_path, monkeypatch, caplog):
    from contrastive_sentence_embeddings.pipelines.datasets import RawFileDataset

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(raw_sources.COPY_LIMIT_ENV_VAR, "0.000001")  # 1 byte: the 5-byte file is "large"
    source = tmp_path / "mirror" / "train.txt"
    source.parent.mkdir()
    source.write_text("text\n")
    record = tmp_path / "data" / "01_raw" / ".mirror_links.json"
    dataset = RawFileDataset("data/01_raw/owt/train.txt", link_record=str(record))
    dataset.save(RawFile(source))
    target = tmp_path / "data/01_raw/owt/train.txt"
    assert target.stat().st_ino == source.stat().st_ino
    assert "data/01_raw/owt/train.txt is a hard link to" in caplog.text and "editing it would edit" in caplog.text
    assert dataset.load().path.resolve() == target  # unchanged: readable
    dataset.save(RawFile(source))  # a rerun over an unchanged source
    with target.open("a") as editor:
        editor.write("edited\n")
    for again in (dataset.load, lambda: dataset.save(RawFile(source))):
        with pytest.raises(raw_sources.RawSourceChanged) as stopped:
            again()
        message = str(stopped.value)
        assert str(source) in message and "data/01_raw/owt/train.txt" in message
        assert "size 5 -> 12 bytes" in message and "delete data/01_raw/.mirror_links.json" in message
    record.unlink()  # the fix the message gives, for a mirror updated on purpose
    assert dataset.load().path.resolve() == target


def test_across_file_systems_a_large_writable_source_is_symlinked_else_copied(tmp_path, monkeypatch):
    monkeypatch.setenv(raw_sources.COPY_LIMIT_ENV_VAR, "0")
    source = tmp_path / "mirror.txt"
    source.write_text("text\n")

    def no_hard_links(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(raw_sources.os, "link", no_hard_links)
    linked = tmp_path / "out" / "linked.txt"
    assert raw_sources.publish_raw_file(RawFile(source), linked) == "symbolic link"
    assert linked.is_symlink() and linked.read_text() == "text\n"
    monkeypatch.setattr(raw_sources.os, "symlink", no_hard_links)
    copied = tmp_path / "out" / "copied.txt"
    assert raw_sources.publish_raw_file(RawFile(source), copied) == "copy"
    assert not copied.is_symlink() and copied.read_text() == "text\n"
    assert sorted(p.name for p in copied.parent.iterdir()) == ["copied.txt", "linked.txt"]  # no temporary left


def test_hub_files_are_moved_out_of_a_staging_folder_that_is_then_removed(tmp_path, monkeypatch):
    cache = tmp_path / "hub-cache" / "blob"  # the Hub's own cache: a staged link points into it
    cache.parent.mkdir()
    cache.write_text("cached\n")

    def fetch(dest, options):
        (dest / "part").mkdir()
        (dest / "part" / "train.txt").write_text("downloaded\n")
        (dest / "wiki.txt").symlink_to(cache)

    monkeypatch.setattr(raw_sources.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    source = raw_sources.RawSource("fake", "fake", "a fake source", fetch)
    files = raw_sources._fetch_from_hub(source, tmp_path / "no-mirror", {}, None)
    staging = files["wiki.txt"].staged_in
    assert staging is not None and staging.parent == tmp_path / "tmp"
    out = tmp_path / "data" / "01_raw" / "fake"
    hows = {key: raw_sources.publish_raw_file(raw, out / key) for key, raw in sorted(files.items())}
    assert hows == {"part/train.txt": "move", "wiki.txt": "copy"}  # the Hub's cache is writable: not linked
    assert (out / "part/train.txt").read_text() == "downloaded\n" and (out / "wiki.txt").read_text() == "cached\n"
    assert not (out / "wiki.txt").is_symlink() and cache.read_text() == "cached\n"
    assert not staging.exists() and list((tmp_path / "tmp").iterdir()) == []


def test_a_failed_download_removes_its_own_staging_folder_but_never_a_given_one(tmp_path, monkeypatch):
    def fetch(dest, options):
        (dest / "partial.txt").write_text("half")
        raise ConnectionError("no network")

    monkeypatch.setattr(raw_sources.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    source = raw_sources.RawSource("fake", "fake", "a fake source", fetch)
    with pytest.raises(RawDataUnavailable, match="ConnectionError: no network"):
        raw_sources._fetch_from_hub(source, tmp_path / "no-mirror", {}, None)
    assert list((tmp_path / "tmp").iterdir()) == []
    given = tmp_path / "given"
    with pytest.raises(RawDataUnavailable):
        raw_sources._fetch_from_hub(source, tmp_path / "no-mirror", {}, given)
    assert (given / "partial.txt").read_text() == "half"  # the caller's folder: not ours to delete


def test_a_download_that_brings_no_file_leaves_no_staging_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(raw_sources.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    source = raw_sources.RawSource("fake", "fake", "a fake source", lambda dest, options: None)
    assert raw_sources._fetch_from_hub(source, tmp_path / "no-mirror", {}, None) == {}
    assert list((tmp_path / "tmp").iterdir()) == []
