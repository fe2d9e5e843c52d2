"""Kedro datasets of this project.

* ``RawFileDataset``: the catalog type of everything in ``data/01_raw``; loading gives
  a lazy :class:`~contrastive_sentence_embeddings.data.raw_file.RawFile` handle
  (nothing is read until a node streams it), saving copies a file byte for byte. Used
  inside a ``partitions.PartitionedDataset`` it represents a raw directory.
* ``MetricsFolderDataset``: a folder of per-model metrics files that may be empty.
* ``SentenceEncoderDataset``: a trained model (``<method>.model``), saved for
  sentence-transformers and AutoModel, named after its folder.
* ``EmbeddingCacheDataset``: a content-addressed embedding cache filled in place.
* ``PairPredictionsDataset``: a model's per-pair STS predictions, for bootstrap tests.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from contrastive_sentence_embeddings.data.raw_file import RawFile


class RawFileDataset(AbstractDataset[RawFile, "RawFile | bytes | str | Path"]):
    """One raw file, copied unchanged on save and handed out lazily on load.

    Args:
        filepath: where the file lives in the project (e.g. under ``data/01_raw``).
        encoding: the text encoding readers should expect (``utf-8``; SentEval's
            TREC training file is ``iso-8859-1``).
    """

    def __init__(self, filepath: str, encoding: str = "utf-8", metadata: dict | None = None):
        self._filepath = Path(filepath)
        self._encoding = encoding
        self.metadata = metadata

    def load(self) -> RawFile:
        if not self._filepath.is_file():
            raise DatasetError(
                f"Raw file {self._filepath} does not exist. Run "
                "`kedro run --pipeline=raw_data` to bring the raw data in."
            )
        return RawFile(self._filepath, self._encoding)

    def save(self, data: RawFile | bytes | str | Path) -> None:
        self._filepath.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, RawFile):
            data = data.path
        if isinstance(data, Path):
            if data.resolve() != self._filepath.resolve():
                shutil.copyfile(data, self._filepath)
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
        return {"filepath": str(self._filepath), "encoding": self._encoding}


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
        from contrastive_sentence_embeddings.training.saving import save_sentence_encoder

        # The model is called after its catalog entry (``name``: its namespace, e.g.
        # simcse or simcse.seed43), else its folder, so the name in its metadata, its
        # metrics file and its leaderboard row can never disagree.
        name = self._name or self._filepath.name
        metadata = {"name": name, **{k: v for k, v in data.metadata.items() if k != "name"}}
        save_sentence_encoder(self._filepath, data.encoder, data.tokenizer, data.pooling, metadata,
                              head=getattr(data, "head", None))

    def load(self) -> str:
        from contrastive_sentence_embeddings.encoding import METADATA_FILE

        if not (self._filepath / METADATA_FILE).is_file():
            raise DatasetError(f"{self._filepath}: no trained model here (no {METADATA_FILE}); run its pipeline first")
        return str(self._filepath)

    def _exists(self) -> bool:
        from contrastive_sentence_embeddings.encoding import METADATA_FILE

        return (self._filepath / METADATA_FILE).is_file()

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
