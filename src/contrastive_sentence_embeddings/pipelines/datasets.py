"""Kedro datasets of this project.

* ``RawFileDataset``: the catalog type of everything in ``data/01_raw``; loading gives
  a lazy :class:`~contrastive_sentence_embeddings.data.raw_file.RawFile` handle
  (nothing is read until a node streams it), saving publishes a file unchanged, linked
  rather than copied where the file system allows (``publish_raw_file`` in
  ``data/raw_sources.py``). Used inside a ``partitions.PartitionedDataset`` it
  represents a raw directory.
* ``AtomicParquetDataset`` and ``AtomicJSONDataset``: kedro-datasets'
  ``pandas.ParquetDataset`` and ``json.JSONDataset`` whose saves to the local file
  system are atomic (``atomic_files.replaced_atomically``): the file is written beside
  its target under a hidden temporary name, flushed to disk, and renamed over the
  target with ``os.replace``. A crash or a full disk during a rerun leaves the previous
  file intact (and a ``.<name>.writing-*`` file at worst), never a truncated one.
* ``ArrowDataset``: a prepared data set as a folder of Arrow shards (the layout of
  HuggingFace ``datasets``' ``save_to_disk``), loaded memory-mapped, so a reader's
  memory does not grow with the data; published atomically as a whole folder.
* ``MetricsFolderDataset``: a folder of per-model metrics files that may be empty.
* ``SentenceEncoderDataset``: a trained model (``<method>.model``), saved for
  sentence-transformers and AutoModel, named after its catalog entry.
* ``ModelCardDataset``: the ``README.md`` model card inside a trained model's folder
  (``<method>.model_card``), written atomically, and only into a saved model.
* ``EmbeddingCacheDataset``: a content-addressed embedding cache filled in place.
* ``PairPredictionsDataset``: a model's per-pair STS predictions, for bootstrap tests.
* ``TrainingCurveDataset``: a training curve (``<method>.training_curve``) as two CSV
  files, the training log and the dev curve (``training/curves.py``), each written
  atomically; loading joins them back into the trainer's table.
* ``MtebResultsDataset``: a run's STS scores as MTEB's result files, one folder per run.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
import pyarrow as pa
from kedro.io import AbstractDataset, DatasetError
from kedro.io.core import get_filepath_str
from kedro_datasets.json import JSONDataset
from kedro_datasets.pandas import ParquetDataset
from kedro_datasets.text import TextDataset

from contrastive_sentence_embeddings.runs.atomic_files import folder_replaced_atomically, replaced_atomically

from contrastive_sentence_embeddings.data.raw_file import RawFile

logger = logging.getLogger(__name__)


class RawFileDataset(AbstractDataset[RawFile, "RawFile | bytes | str | Path"]):
    """One raw file, published unchanged on save (a file given as a ``RawFile`` or path
    is linked, not copied, where the file system allows:
    :func:`~contrastive_sentence_embeddings.data.raw_sources.publish_raw_file`) and
    handed out lazily on load.

    Args:
        filepath: where the file lives in the project (e.g. under ``data/01_raw``).
        encoding: the text encoding readers should expect (``utf-8``; SentEval's
            TREC training file is ``iso-8859-1``).
        link_record: a JSON file recording the files published as links to a source
            this user could change (``publish_raw_file``); loading or publishing such a
            file again stops when its source changed since.
    """

    def __init__(self, filepath: str, encoding: str = "utf-8", metadata: dict | None = None,
                 link_record: str | None = None):
        self._filepath = Path(filepath)
        self._encoding = encoding
        self._link_record = Path(link_record) if link_record else None
        self.metadata = metadata

    def load(self) -> RawFile:
        if not self._filepath.is_file():
            raise DatasetError(
                f"Raw file {self._filepath} does not exist. Run "
                "`kedro run --pipeline=raw_data` to bring the raw data in."
            )
        if self._link_record is not None:
            from contrastive_sentence_embeddings.data.raw_sources import check_linked_source

            check_linked_source(self._filepath, self._link_record)
        return RawFile(self._filepath, self._encoding)

    def save(self, data: RawFile | bytes | str | Path) -> None:
        from contrastive_sentence_embeddings.data.raw_sources import publish_raw_file

        self._filepath.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, Path):
            data = RawFile(data)
        if isinstance(data, RawFile):
            how = publish_raw_file(data, self._filepath, self._link_record)
            logger.debug("%s: %s of %s", self._filepath, how, data.path)
        elif isinstance(data, bytes):
            self._filepath.write_bytes(data)
        elif isinstance(data, str):
            self._filepath.write_text(data, encoding=self._encoding)
        else:
            raise DatasetError(
                f"Cannot save {type(data).__name__} to raw file {self._filepath}"
            )

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "encoding": self._encoding, "link_record": self._link_record}


class _AtomicSave:
    """Mixin for fsspec-based kedro-datasets: a local save goes to a temporary file in
    the target's folder (same file system, so the rename is atomic), which then
    replaces the target in one ``os.replace``. Other protocols (object stores) write
    whole objects anyway and are saved as the parent class does."""

    _writing_to: PurePosixPath | None = None

    def _get_save_path(self) -> PurePosixPath:
        return self._writing_to if self._writing_to is not None else super()._get_save_path()

    def save(self, data) -> None:
        if getattr(self, "_protocol", "file") != "file":
            return super().save(data)
        target = Path(get_filepath_str(super()._get_save_path(), self._protocol))
        with replaced_atomically(target, before_replace="dataset_save:before_replace") as temporary:
            self._writing_to = PurePosixPath(temporary.as_posix())
            try:
                super().save(data)
            finally:
                self._writing_to = None
        self._invalidate_cache()


class AtomicParquetDataset(_AtomicSave, ParquetDataset):
    """``pandas.ParquetDataset`` with an atomic local save (see the module docstring)."""


class AtomicJSONDataset(_AtomicSave, JSONDataset):
    """``json.JSONDataset`` with an atomic local save (see the module docstring)."""


class ModelCardDataset(_AtomicSave, TextDataset):
    """A model card: ``README.md`` in a trained model's folder, UTF-8, replaced
    atomically. It is written after the model is scored, so it is saved only into a
    folder that holds a saved model (``cse_metadata.json``): a card on its own would
    make a folder that the next training save refuses to replace, as it would not
    look like a model. A new save of the model replaces the whole folder, card
    included, so a stale card never outlives the weights it describes."""

    def __init__(self, *, filepath: str, metadata: dict | None = None, **kwargs):
        fs_args = kwargs.pop("fs_args", None) or {}
        fs_args.setdefault("open_args_load", {"mode": "r", "encoding": "utf-8"})
        fs_args.setdefault("open_args_save", {"mode": "w", "encoding": "utf-8"})
        super().__init__(filepath=filepath, metadata=metadata, fs_args=fs_args, **kwargs)

    def save(self, data: str) -> None:
        from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE

        folder = Path(get_filepath_str(self._filepath, self._protocol)).parent
        if getattr(self, "_protocol", "file") == "file" and not (folder / METADATA_FILE).is_file():
            raise DatasetError(f"{folder}: no saved model here (no {METADATA_FILE}); a model card is written "
                               "into the folder of the model it describes, after that model is trained")
        super().save(data)


# Files ``datasets.Dataset.save_to_disk`` writes beside its shards: a folder holding
# them is one this class wrote, and only such a folder is ever replaced or deleted.
_ARROW_FOLDER_MARKERS = ("state.json", "dataset_info.json")


class ArrowDataset(AbstractDataset):
    """A prepared data set (sentences, documents with token ids, spans, pairs) as a
    folder of Arrow shards written by ``datasets.Dataset.save_to_disk``.

    Loading gives a ``datasets.Dataset`` memory-mapped from the shards: nothing is
    read into memory until a reader asks for rows or columns, so a 10 GB token table
    costs its readers page cache, not heap, and every training process shares it.
    Saving takes a ``datasets.Dataset`` (e.g. the result of ``map``/``filter`` with
    ``num_proc`` workers), a ``pyarrow.Table`` or a pandas ``DataFrame``; it writes the
    shards (at most ``max_shard_size`` each) into a hidden folder beside the target
    and swaps it in with two renames, so a crash leaves the previous folder (or its
    ``.<name>.old-*`` copy) intact, never a half-written one. An existing target that
    is not such a folder (no ``state.json``) is refused, never deleted.

    A data set memory-mapped from files (a node's ``map``/``filter`` result) is written
    a shard at a time, each shard read through a memory map of its own that is closed
    once the shard is written: a page read through a memory map stays in the reading
    process's resident memory until the map is closed, so one ``save_to_disk`` of 10 GB
    of token ids would make the Kedro process's memory grow with the data; this way it
    holds at most one shard's pages (``max_shard_size``). The folder is the one
    ``save_to_disk`` writes (each shard is written by ``save_to_disk``; the shards are
    then listed in one ``state.json``).

    Args:
        path: the folder (e.g. ``data/03_primary/long_documents``).
        max_shard_size: the largest shard, as ``save_to_disk`` takes it. 64 MB, not
            ``datasets``' 500 MB: a save holds one shard's pages at a time, and readers
            map the shards, so their number costs nothing.
        num_proc: processes writing shards (``None``: this one, shard by shard).
    """

    def __init__(self, path: str, max_shard_size: str | int = "64MB", num_proc: int | None = None,
                 metadata: dict | None = None):
        self._path = Path(path)
        self._max_shard_size = max_shard_size
        self._num_proc = num_proc
        self.metadata = metadata

    def load(self):
        import datasets

        if not self._exists():
            raise DatasetError(f"{self._path}: no prepared data set here (no state.json); run the pipeline "
                               "that writes it first (e.g. `kedro run --tags=data_processing`)")
        return datasets.load_from_disk(str(self._path), keep_in_memory=False)

    def save(self, data) -> None:
        import datasets

        if isinstance(data, pd.DataFrame):
            data = datasets.Dataset.from_pandas(data, preserve_index=False)
        elif isinstance(data, pa.Table):
            data = datasets.Dataset(data)
        elif not isinstance(data, datasets.Dataset):
            raise DatasetError(f"{self._path}: cannot save {type(data).__name__} as an Arrow data set "
                               "(give a datasets.Dataset, a pyarrow.Table or a pandas DataFrame)")
        if self._path.exists() and not self._exists():
            raise DatasetError(f"{self._path} exists and is not a data set this project wrote (no state.json); "
                               "move it away rather than have it replaced")
        with folder_replaced_atomically(self._path, before_replace="dataset_save:before_replace") as staging:
            # shard by shard needs the files to map each shard anew; a file its producer has
            # already unlinked (still readable through the map that holds it) cannot be
            if self._num_proc is None and data.cache_files and len(data) and all(
                    Path(f["filename"]).is_file() for f in data.cache_files):
                _save_shard_by_shard(data, staging, self._max_shard_size)
            else:
                data.save_to_disk(str(staging), max_shard_size=self._max_shard_size, num_proc=self._num_proc)

    def _exists(self) -> bool:
        return all((self._path / marker).is_file() for marker in _ARROW_FOLDER_MARKERS)

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "max_shard_size": self._max_shard_size, "num_proc": self._num_proc}


def _save_shard_by_shard(data, folder: Path, max_shard_size) -> None:
    """``data.save_to_disk(folder)``, but each shard (at most ``max_shard_size``) read
    through a memory map opened for it alone and closed before the next: a shard is
    a contiguous slice, pickled and unpickled (which maps its files anew, as
    ``datasets`` does to hand a data set to a worker process), saved by
    ``save_to_disk`` into a scratch folder, then its file is moved into ``folder``
    under the name ``save_to_disk`` gives shard i of n, and ``state.json`` lists them all."""
    import json
    import pickle

    from datasets import config
    from datasets.utils.py_utils import convert_file_size_to_int

    shards = max(1, min(len(data), int(data._estimate_nbytes() / convert_file_size_to_int(max_shard_size)) + 1))
    folder.mkdir()
    state = None
    for index in range(shards):
        shard = pickle.loads(pickle.dumps(data.shard(num_shards=shards, index=index, contiguous=True)))
        scratch = folder / f".shard-{index:05d}"
        shard.save_to_disk(str(scratch), num_shards=1)
        del shard  # its memory map closes: the pages read for it leave this process
        name = f"data-{index:05d}-of-{shards:05d}.arrow"
        os.replace(scratch / "data-00000-of-00001.arrow", folder / name)
        if state is None:
            state = json.loads((scratch / config.DATASET_STATE_JSON_FILENAME).read_text(encoding="utf-8"))
            os.replace(scratch / config.DATASET_INFO_FILENAME, folder / config.DATASET_INFO_FILENAME)
        shutil.rmtree(scratch)
    state["_data_files"] = [{"filename": f"data-{index:05d}-of-{shards:05d}.arrow"} for index in range(shards)]
    (folder / config.DATASET_STATE_JSON_FILENAME).write_text(json.dumps(state, indent=2, sort_keys=True),
                                                             encoding="utf-8")


from kedro_datasets.partitions import PartitionedDataset  # noqa: E402


class MetricsFolderDataset(PartitionedDataset):
    """A folder of per-model metrics files (a ``PartitionedDataset``) that may be empty:
    the leaderboard is built from whatever has been evaluated so far, so "no file yet"
    loads as ``{}`` instead of Kedro's "No partitions found" error."""

    def load(self):
        self._invalidate_caches()
        if not self._list_partitions():
            return {}
        return super().load()


class SentenceEncoderDataset(AbstractDataset):
    """A trained sentence encoder in ``data/06_models/<run>``.

    Saving takes a :class:`~contrastive_sentence_embeddings.training.run.TrainedEncoder`
    and writes a folder that ``SentenceTransformer(path)`` and ``AutoModel`` load (the
    training heads are not in it), with ``cse_metadata.json`` beside the weights. A
    ``head`` attribute (CLSR's trained MLP over a frozen encoder) is saved as ``Dense``
    modules after the pooling, which ``SentenceEncoder.load`` applies too.
    Loading gives the folder's path: evaluation loads the encoder itself, on the
    device it wants.
    """

    def __init__(self, filepath: str, name: str | None = None, metadata: dict | None = None):
        self._filepath = Path(filepath)
        self._name = name
        self.metadata = metadata

    def save(self, data) -> None:
        """Publish the model, then delete the run's training checkpoint (named in the
        metadata's ``training.checkpoint_dir``): it is kept until now, because a
        crash before the model is on disk would otherwise lose the whole run."""
        from contrastive_sentence_embeddings.training.saving import save_sentence_encoder
        from contrastive_sentence_embeddings.training.trainer import release_checkpoints

        # The model is called after its catalog entry (``name``: its namespace, e.g.
        # simcse or simcse.seed43), else its folder, so the name in its metadata, its
        # metrics file and its leaderboard row can never disagree.
        name = self._name or self._filepath.name
        metadata = {"name": name, **{k: v for k, v in data.metadata.items() if k != "name"}}
        save_sentence_encoder(self._filepath, data.encoder, data.tokenizer, data.pooling, metadata,
                              head=getattr(data, "head", None))
        release_checkpoints((data.metadata.get("training") or {}).get("checkpoint_dir"))

    def load(self) -> str:
        from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE
        from contrastive_sentence_embeddings.training.saving import recover_interrupted_saves

        recover_interrupted_saves(self._filepath)
        if not (self._filepath / METADATA_FILE).is_file():
            raise DatasetError(f"{self._filepath}: no trained model here (no {METADATA_FILE}); run its pipeline first")
        return str(self._filepath)

    def _exists(self) -> bool:
        from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE
        from contrastive_sentence_embeddings.training.saving import recover_interrupted_saves

        recover_interrupted_saves(self._filepath)
        return (self._filepath / METADATA_FILE).is_file()

    @property
    def filepath(self) -> Path:
        """The model's folder."""
        return self._filepath

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class EmbeddingCacheDataset(AbstractDataset):
    """A folder of cached sentence embeddings, content-addressed: one ``<sha256>.npy``
    per (model key, sentence list), written and read by
    :class:`~contrastive_sentence_embeddings.evaluation.transfer.EmbeddingCache`.
    The key covers the encoder's identity and every sentence, so a changed encoder or
    changed data miss and are encoded again, while the same ones hit on any later
    run. Loading gives the folder's path (created if missing); the nodes fill it in
    place, so the data set is never saved as a whole. Old entries are not evicted:
    delete the folder to reclaim the space.
    """

    def __init__(self, path: str, metadata: dict | None = None):
        self._path = Path(path)
        self.metadata = metadata

    def load(self) -> str:
        self._path.mkdir(parents=True, exist_ok=True)
        return str(self._path)

    def save(self, data) -> None:
        raise DatasetError(f"{self._path} is an embedding cache filled in place by the nodes that read it; "
                           "it is not saved as a whole")

    def _exists(self) -> bool:
        return self._path.is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}


class MtebResultsDataset(AbstractDataset):
    """A run's results in MTEB's layout (``data/08_reporting/mteb/<run>``, see
    :mod:`~contrastive_sentence_embeddings.evaluation.mteb_results`): saving takes
    ``{path in the folder: JSON content}`` and publishes the whole folder at once (written
    in a hidden sibling, then swapped in), so a reader never sees a mix of two runs'
    files; a folder it did not write (no ``export_report.json``; an empty one excepted,
    such as a method's once its seeds' results were removed) is never replaced. Loading
    gives the same mapping back. Used inside a ``partitions.PartitionedDataset``
    (``filepath_arg: path``) it writes one such folder per partition (the baseline's
    poolings)."""

    def __init__(self, path: str, metadata: dict | None = None):
        self._path = Path(path)
        self.metadata = metadata

    @property
    def path(self) -> Path:
        """The run's folder (the hook that removes stale runs' results reads it)."""
        return self._path

    def save(self, data) -> None:
        import json

        from contrastive_sentence_embeddings.evaluation.mteb_results import REPORT_FILE

        if REPORT_FILE not in data:
            raise DatasetError(f"{self._path}: MTEB results come with their {REPORT_FILE}; got {sorted(data)}")
        if self._path.exists() and not (self._path / REPORT_FILE).is_file() and \
                (not self._path.is_dir() or any(self._path.iterdir())):  # an empty folder holds nothing to lose
            raise DatasetError(f"{self._path} exists and holds no {REPORT_FILE}: not MTEB results this project "
                               "wrote; move it away rather than have it replaced")
        with folder_replaced_atomically(self._path, before_replace="dataset_save:before_replace") as staging:
            for relative, content in data.items():
                if Path(relative).is_absolute() or ".." in Path(relative).parts:
                    raise DatasetError(f"{self._path}: {relative!r} is not a path inside the folder")
                target = staging / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    def load(self) -> dict:
        import json

        if not self._exists():
            raise DatasetError(f"{self._path}: no MTEB results here; run the evaluation that writes them first")
        return {path.relative_to(self._path).as_posix(): json.loads(path.read_text(encoding="utf-8"))
                for path in sorted(self._path.rglob("*.json"))}

    def _exists(self) -> bool:
        from contrastive_sentence_embeddings.evaluation.mteb_results import REPORT_FILE

        return (self._path / REPORT_FILE).is_file()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}


class PairPredictionsDataset(AbstractDataset):
    """A model's per-pair STS predictions (gold score, predicted cosine, subset, per
    task) in one ``.npz``, written atomically by
    :func:`~contrastive_sentence_embeddings.evaluation.significance.save_pair_predictions`:
    what the leaderboard's bootstrap tests resample."""

    def __init__(self, filepath: str, metadata: dict | None = None):
        self._filepath = Path(filepath)
        self.metadata = metadata

    def save(self, data) -> None:
        from contrastive_sentence_embeddings.evaluation.significance import save_pair_predictions

        save_pair_predictions(self._filepath, data)

    def load(self):
        from contrastive_sentence_embeddings.evaluation.significance import load_pair_predictions

        return load_pair_predictions(self._filepath)

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class TrainingCurveDataset(AbstractDataset):
    """A training curve, saved split (:func:`~contrastive_sentence_embeddings.training.curves.split_curve`)
    into the training log (``filepath``: loss terms, learning rate, examples/s, memory)
    and the dev curve (``dev_filepath``: the dev scores, only at the steps that scored
    them), so that no plotted column has empty cells that a plot reads as 0. Each file
    is written atomically; loading joins them into the trainer's one table.

    Args:
        filepath: the training log's CSV file.
        dev_filepath: the dev curve's CSV file.
        terms_filepath: optional, the loss and each of its terms in long form
            (``curves.loss_terms``), the file the loss chart draws.
    """

    def __init__(self, filepath: str, dev_filepath: str, terms_filepath: str | None = None,
                 metadata: dict | None = None):
        self._filepath = Path(filepath)
        self._dev_filepath = Path(dev_filepath)
        self._terms_filepath = Path(terms_filepath) if terms_filepath else None
        self.metadata = metadata

    def save(self, data: pd.DataFrame) -> None:
        from contrastive_sentence_embeddings.training.curves import loss_terms, split_curve

        training_log, dev_curve = split_curve(data)
        tables = [(dev_curve, self._dev_filepath), (training_log, self._filepath)]
        if self._terms_filepath is not None:
            tables.insert(0, (loss_terms(training_log), self._terms_filepath))
        for table, target in tables:
            with replaced_atomically(target) as temporary:
                table.to_csv(temporary, index=False, encoding="utf-8")

    def load(self) -> pd.DataFrame:
        from contrastive_sentence_embeddings.training.curves import join_curve

        missing = [str(path) for path in (self._filepath, self._dev_filepath) if not path.is_file()]
        if missing:
            raise DatasetError(f"training curve incomplete: {', '.join(missing)} missing (both files are written "
                               "by the run that trained the model)")
        return join_curve(pd.read_csv(self._filepath), pd.read_csv(self._dev_filepath))

    def _exists(self) -> bool:
        return self._filepath.is_file() and self._dev_filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "dev_filepath": str(self._dev_filepath),
                "terms_filepath": str(self._terms_filepath) if self._terms_filepath else None}

