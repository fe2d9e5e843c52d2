"""Is a model folder whole? Checks made on every load of an encoder, before any score.

A folder that lost or damaged a file can still load: without ``tokenizer.json``,
transformers builds a tokenizer from ``tokenizer_config.json`` alone, with a vocabulary
of its five special tokens, so every word becomes ``[UNK]`` and the model scores 13 where
it scored 75, with no warning. Three checks stop that, each naming the file:

* **the saver's record**: a folder this project saved lists every file of the model with
  its size in ``cse_metadata.json`` (``model_fingerprint.FINGERPRINT_KEY``); a file that is
  missing or has another size is broken (an added file is not: a user may add a README);
* **the tokenizer's vocabulary against the model's**: token ids at or beyond the model's
  embedding rows cannot be looked up, and a vocabulary under half of the model's means
  the tokenizer is not the one the model was trained with;
* **known sentences**: a few plain English sentences must not tokenise mostly to the
  unknown token (a tokenizer without one, byte-level BPE, passes).

Any folder is checked this way, also an encoder that was never saved here (an offline
copy, a downloaded checkpoint): the first check needs the saver's record, the others not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from contrastive_sentence_embeddings.encoders.fingerprint import FINGERPRINT_KEY, METADATA_FILE, fingerprinted_files

# Sentences any tokenizer of an English (or multilingual) model knows every word of.
KNOWN_SENTENCES = (
    "A man is playing a guitar.",
    "The cat sits on the mat in the house.",
    "Two children are running through a green field.",
)
# More unknown tokens than this share of a known sentence's tokens: the vocabulary is lost.
MOST_UNKNOWN = 0.5
# A tokenizer whose vocabulary is under this share of the model's embedding rows is not
# the model's (models pad their rows to a multiple of 8 or 64, never to twice the size).
SMALLEST_VOCABULARY_SHARE = 0.5


class BrokenModelFolder(ValueError):
    """A model folder whose files are not what its saver wrote, or whose tokenizer cannot
    be the model's: the message names the folder, the file and what is wrong, in one line."""


def recorded_file_problems(folder: Path, metadata: Mapping) -> list[str]:
    """What differs between the files the saver recorded (``metadata``'s fingerprint
    sizes) and the folder: one phrase per missing or resized file; [] when nothing does
    or nothing was recorded."""
    recorded = metadata.get(FINGERPRINT_KEY)
    sizes = recorded.get("sizes") if isinstance(recorded, Mapping) else None
    if not isinstance(sizes, Mapping):
        return []
    on_disk = {file.relative_to(folder).as_posix(): file.stat().st_size for file in fingerprinted_files(folder)}
    problems = []
    for name, size in sizes.items():
        if name not in on_disk:
            problems.append(f"{name} is missing")
        elif on_disk[name] != size:
            problems.append(f"{name} has {on_disk[name]:,} bytes where the saver wrote {int(size):,}")
    return problems


def read_folder_metadata(folder: Path) -> tuple[dict, str | None]:
    """The folder's ``cse_metadata.json`` read once: ``(metadata, None)``, ``({}, None)``
    when there is none, or ``({}, what is wrong)`` when it is cut short, not JSON or not
    an object."""
    file = folder / METADATA_FILE
    if not file.is_file():
        return {}, None
    try:
        content = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        return {}, f"{METADATA_FILE} is not UTF-8 text ({error.reason} at byte {error.start})"
    except json.JSONDecodeError as error:
        return {}, (f"{METADATA_FILE} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno}: "
                    "cut short?)")
    if not isinstance(content, dict):
        return {}, f"{METADATA_FILE} holds a JSON {type(content).__name__}, not the saver's object"
    return content, None


def folder_problems(folder: str | Path) -> list[str]:
    """Everything wrong with a saved model folder that can be seen without loading it:
    its metadata file, then the files that file records (:func:`recorded_file_problems`)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    metadata, problem = read_folder_metadata(folder)
    return [problem] if problem else recorded_file_problems(folder, metadata)


def check_recorded_files(folder: str | Path) -> None:
    """Raise :class:`BrokenModelFolder` when a file the saver recorded is missing or resized."""
    problems = folder_problems(folder)
    if problems:
        raise BrokenModelFolder(
            f"model folder {folder}: {'; '.join(problems)} (its {METADATA_FILE} lists every file the saver wrote); "
            "restore the folder (`dvc checkout`) or train the model again")


def vocabulary_problem(tokenizer_size: int, embedding_rows: int) -> str | None:
    """Why a tokenizer of ``tokenizer_size`` tokens cannot serve a model with
    ``embedding_rows`` token embeddings; None when it can."""
    if embedding_rows <= 0:
        return None
    if tokenizer_size > embedding_rows:
        return (f"the tokenizer has {tokenizer_size:,} tokens but the model only {embedding_rows:,} token embeddings "
                "(ids beyond them cannot be looked up)")
    if tokenizer_size < SMALLEST_VOCABULARY_SHARE * embedding_rows:
        return (f"the tokenizer has {tokenizer_size:,} tokens for the model's {embedding_rows:,} token embeddings "
                "(a tokenizer file is missing or is another model's)")
    return None


def unknown_share(token_ids: Sequence[int], unknown_id: int | None, special_ids: set[int]) -> float:
    """The share of a sentence's tokens (its special tokens left out) that are the unknown token."""
    tokens = [token for token in token_ids if token not in special_ids]
    if unknown_id is None or not tokens:
        return 0.0
    return sum(token == unknown_id for token in tokens) / len(tokens)


def check_tokenizer(tokenizer, embedding_rows: int, where: str) -> None:
    """Raise :class:`BrokenModelFolder` when ``tokenizer`` cannot be the tokenizer of a
    model with ``embedding_rows`` token embeddings (module docstring); ``where`` names
    the folder or Hub id in the message."""
    problem = vocabulary_problem(len(tokenizer), embedding_rows)
    if problem is None:
        unknown_id = getattr(tokenizer, "unk_token_id", None)
        special = set(getattr(tokenizer, "all_special_ids", []) or []) - {unknown_id}
        for sentence in KNOWN_SENTENCES:
            share = unknown_share(tokenizer(sentence)["input_ids"], unknown_id, special)
            if share > MOST_UNKNOWN:
                problem = (f"the tokenizer turns {share:.0%} of the words of {sentence!r} into its unknown token "
                           f"{tokenizer.unk_token!r} (its vocabulary file is missing or broken)")
                break
    if problem:
        raise BrokenModelFolder(f"model {where}: {problem}; no score is computed with it")


def embedding_rows(model) -> int:
    """How many token embeddings ``model`` (a transformers model) has."""
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, NotImplementedError):
        return int(getattr(model.config, "vocab_size", 0) or 0)


def check_loaded_model(source: str, tokenizer, model) -> None:
    """The checks of a loaded model and its tokenizer from ``source`` (a folder or a Hub
    id): its vocabulary and the known sentences (:func:`check_tokenizer`). The saver's
    record is checked before loading (:func:`check_recorded_files`), not again here."""
    check_tokenizer(tokenizer, embedding_rows(model), source)


def load_checked_tokenizer(name: str):
    """The encoder's tokenizer (``encoders.load_tokenizer``), its folder checked against
    the saver's record first: data preparation tokenises with it before any model loads."""
    from contrastive_sentence_embeddings.encoders.loading import load_tokenizer, resolve_encoder

    check_recorded_files(resolve_encoder(name))
    return load_tokenizer(name)
