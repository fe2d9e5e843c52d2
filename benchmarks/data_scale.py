"""Data preparation at scale: the ``data_processing`` pipeline with the paper's data
settings on a synthetic corpus of several sizes, run as a user runs it (issue 14).

    python benchmarks/data_scale.py [--sizes 2000 10000 40000] [--sentences 100000 1000000]
        [--num-proc 1 2] [--workdir DIR] [--keep] [--skip-ceiling] [--quick]

1. Generates, seeded, an OpenWebText-like corpus (one document of 2,500-6,000 words per
   line, runs of real Wikipedia sentences from the offline mirror's WikiText-2 articles
   and wiki1m sample, recombined) and wiki1m-like sentence files (one sentence per line,
   each a real sentence's head spliced onto another's tail, so they are distinct), each
   in a scratch mirror laid out like ``../shared/datasets``.
2. For each size, in a scratch Kedro project (this repository's ``pyproject.toml`` and
   ``conf/``; the package from this repository's ``src``), with ``CSE_DATA_MIRROR`` at
   that mirror: ``kedro run --env paper --pipelines=raw_data --nodes=ingest_...`` once,
   then per ``--num-proc`` value the documents nodes (``build_long_documents``,
   ``sample_declutr_spans``) or the sentence nodes (``collect_sentence_candidates``,
   ``sample_sentences``) with ``--params data_processing.num_proc=N``. Every run is
   timed and its peak memory taken: the RSS of the ``kedro`` process and all its
   descendants, summed, polled every 0.2 s (workers are processes of their own), and
   the largest single process's ``ru_maxrss`` from ``wait4``.
3. The ceiling: the encoder's fast tokenizer alone on the same documents, batched, in
   1 and 2 single-threaded worker processes (and 1 process with the tokenizer's own
   threads), tokens/s.
4. Results go to ``benchmarks/results/data_scale.json`` and ``.csv``, a Markdown table
   is printed, with the extrapolation to the paper's corpus and the issue's targets
   checked one by one.

The paper's encoder (``bert-base-uncased``) is replaced by the offline default
(all-MiniLM-L6-v2), whose tokenizer has the same uncased BERT WordPiece vocabulary, so
token counts are the same. See docs/record/data_scale.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import multiprocessing
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS_JSON = REPO / "benchmarks" / "results" / "data_scale.json"
RESULTS_CSV = REPO / "benchmarks" / "results" / "data_scale.csv"
SOURCE_MIRROR = Path(os.environ.get("CSE_DATA_MIRROR", REPO.parent / "shared" / "datasets"))
OFFLINE_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"

DOCUMENT_WORDS = (2500, 6000)
DOCUMENT_NODES = ("build_long_documents", "sample_declutr_spans")
SENTENCE_NODES = ("collect_sentence_candidates", "sample_sentences")
# raw_longdocs is an input of both node pairs, even where the paper settings read none of it.
DOCUMENT_SOURCES = ("openwebtext", "longdocs")
SENTENCE_SOURCES = ("wiki", "longdocs")
# The file names the Hub fetchers write (data/raw_sources.py): the paper-scale layout.
OPENWEBTEXT_FILE = "openwebtext/train.txt"
SENTENCES_FILE = "wiki/wiki1m_for_simcse.txt"

# The paper's corpus (issue 14): OpenWebText in, DeCLUTR's documents kept, wiki1m.
PAPER_DOCUMENTS_IN = 8_000_000
PAPER_TOKENS_IN = 9e9
PAPER_DOCUMENTS_KEPT = 495_243
PAPER_SENTENCES = 1_000_000
GIB = 2**30
POLL_SECONDS = 0.2
# Batch size of the ceiling's tokenizer calls: the paper's tokenize_batch_size.
CEILING_BATCH = 256



# --- the synthetic corpus ---------------------------------------------------------------

_WIKITEXT_TOKENS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" n't", "n't"), (" 's", "'s"))
_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]])")
_SPACE_AFTER = re.compile(r"([(\[$]) ")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def _plain_wikitext(line: str) -> str:
    """WikiText's tokenised text as ordinary prose: its ``@-@`` style joiners undone,
    spaces before punctuation removed, ``<unk>`` placeholders dropped (web text has none)."""
    text = line.replace("<unk>", " ")
    for tokenised, plain in _WIKITEXT_TOKENS:
        text = text.replace(tokenised, plain)
    text = _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text))
    return " ".join(text.split())


def wikipedia_sentences(mirror: Path) -> list[str]:
    """Real Wikipedia sentences in reading order: the WikiText-2 articles of
    ``mirror/longdocs`` (headings left out), then the wiki1m sample of ``mirror/wiki``."""
    sentences: list[str] = []
    for path in sorted((mirror / "longdocs").glob("*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("="):
                continue
            sentences.extend(s for s in _SENTENCE_END.split(_plain_wikitext(stripped)) if len(s.split()) >= 3)
    for path in sorted((mirror / "wiki").glob("*.txt")):
        sentences.extend(s for s in (" ".join(line.split()) for line in path.open(encoding="utf-8")) if s)
    if len(sentences) < 1000:
        raise FileNotFoundError(
            f"{mirror}: expected WikiText articles in longdocs/ and wiki1m sentences in wiki/ "
            f"(../shared/datasets layout), found only {len(sentences)} sentences"
        )
    return sentences


def synthetic_documents(
    sentences: Sequence[str], count: int, seed: int, words: tuple[int, int] = DOCUMENT_WORDS
) -> Iterator[str]:
    """``count`` documents, each a target length drawn uniformly from ``words`` (inclusive),
    filled with runs of 4-40 consecutive ``sentences`` from random places and cut at the
    target's last word. Seeded: the first n documents of a larger count are the same."""
    rng = random.Random(f"{seed}-documents")
    low, high = words
    for _ in range(count):
        target = rng.randint(low, high)
        collected: list[str] = []
        while len(collected) < target:
            start = rng.randrange(len(sentences))
            for sentence in sentences[start : start + rng.randint(4, 40)]:
                collected.extend(sentence.split())
        yield " ".join(collected[:target])


def synthetic_sentences(sentences: Sequence[str], count: int, seed: int) -> Iterator[str]:
    """``count`` distinct-looking sentences of wiki1m's length distribution: the first
    words of one real sentence, then the last words of another, as many words in all as
    the first had."""
    rng = random.Random(f"{seed}-sentences")
    for _ in range(count):
        head = sentences[rng.randrange(len(sentences))].split()
        tail = sentences[rng.randrange(len(sentences))].split()
        cut = rng.randint(1, len(head))
        rest = len(head) - cut
        yield " ".join(head[:cut] + (tail[-rest:] if rest else []))


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


def write_mirror(
    root: Path, source_mirror: Path, seed: int, documents: int = 0, sentences: int = 0
) -> Path:
    """A mirror folder (``../shared/datasets`` layout) at ``root``: ``documents``
    synthetic documents in ``openwebtext/train.txt``, ``sentences`` synthetic sentences
    in ``wiki/wiki1m_for_simcse.txt``, and links to ``source_mirror``'s ``longdocs``
    files (an input the paper settings leave unread). Returns ``root``."""
    pool = wikipedia_sentences(source_mirror)
    if documents:
        _write_lines(root / OPENWEBTEXT_FILE, synthetic_documents(pool, documents, seed))
    if sentences:
        _write_lines(root / SENTENCES_FILE, synthetic_sentences(pool, sentences, seed))
    (root / "longdocs").mkdir(parents=True, exist_ok=True)
    for path in sorted((source_mirror / "longdocs").glob("*.txt")):
        (root / "longdocs" / path.name).symlink_to(path.resolve())
    return root


# --- measuring one run -----------------------------------------------------------------


@dataclass
class Measured:
    wall_s: float
    peak_tree_rss_bytes: int  # sum over the process and its descendants, polled
    # the same for anonymous memory only (RssAnon: heap and the like), leaving out the
    # file-backed pages of memory-mapped Arrow files, which the kernel can drop at will
    peak_tree_anon_bytes: int
    # the tree's proportional set size (Pss): a page shared by k processes counts 1/k in
    # each, so pages a forked worker shares with its parent are counted once, as RSS
    # summed over the tree does not (Linux's smaps_rollup; 0 where it is missing)
    peak_tree_pss_bytes: int
    max_process_rss_bytes: int  # ru_maxrss (largest single process of the tree)
    cpu_s: float  # user + system of the process and its waited-for descendants
    returncode: int


# the node whose throughput is compared with the tokenizer alone
TOKENISING_NODE = "build_long_documents"
# the tree's memory measures fitted and extrapolated (Row fields peak_tree_<measure>_gib)
MEMORY_MEASURES = ("rss", "pss")


def proc_bytes(pid: int, file: str, field: str) -> int:
    """A ``<field>: <n> kB`` line of ``/proc/<pid>/<file>`` in bytes (Linux; 0 where the
    file or the line is missing)."""
    try:
        with open(f"/proc/{pid}/{file}", encoding="ascii") as lines:
            for line in lines:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def anonymous_rss(pid: int) -> int:
    """``RssAnon`` of a process in bytes."""
    return proc_bytes(pid, "status", "RssAnon")


def proportional_set_size(pid: int) -> int:
    """``Pss`` of a process in bytes (``smaps_rollup``)."""
    return proc_bytes(pid, "smaps_rollup", "Pss")


def run_measured(command: Sequence[str], cwd: Path, env: dict[str, str], log_path: Path) -> Measured:
    """Run ``command``, output to ``log_path``; wall time, peak RSS of the whole process
    tree (polled every 0.2 s), and the ``wait4`` resource usage of the process."""
    import psutil

    with log_path.open("w", encoding="utf-8") as log:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        root = psutil.Process(process.pid)
        peak = peak_anon = peak_pss = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                tree = []
            total = anonymous = proportional = 0
            for member in tree:
                try:
                    total += member.memory_info().rss
                    anonymous += anonymous_rss(member.pid)
                    proportional += proportional_set_size(member.pid)
                except psutil.NoSuchProcess:
                    pass
            peak = max(peak, total)
            peak_anon = max(peak_anon, anonymous)
            peak_pss = max(peak_pss, proportional)
            time.sleep(POLL_SECONDS)
        wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return Measured(
        wall_s=round(wall, 2),
        peak_tree_rss_bytes=peak,
        peak_tree_anon_bytes=peak_anon,
        peak_tree_pss_bytes=peak_pss,
        max_process_rss_bytes=usage.ru_maxrss * 1024,  # Linux: kilobytes
        cpu_s=round(usage.ru_utime + usage.ru_stime, 2),
        returncode=process.returncode,
    )


# --- the pipeline, as a user runs it ---------------------------------------------------

LOGGING_YML = """\
version: 1
disable_existing_loggers: false
formatters:
  timed:
    format: "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
    datefmt: "%Y-%m-%dT%H:%M:%S"
handlers:
  console:
    class: logging.StreamHandler
    formatter: timed
    stream: ext://sys.stdout
root:
  level: INFO
  handlers: [console]
"""


def scratch_project(folder: Path) -> Path:
    """A Kedro project folder of its own: this repository's ``pyproject.toml``, ``conf/``
    (``conf/local`` emptied: a developer's local settings are not the paper's), an empty
    ``src/`` and a plain timestamped logging configuration; ``data/`` is written by
    the runs."""
    folder.mkdir(parents=True)
    shutil.copy2(REPO / "pyproject.toml", folder / "pyproject.toml")
    shutil.copytree(REPO / "conf", folder / "conf", ignore=shutil.ignore_patterns("local"))
    (folder / "conf" / "local").mkdir()
    (folder / "logging.yml").write_text(LOGGING_YML)
    # kedro wants a source folder inside the project; the code measured is this
    # repository's src, first on PYTHONPATH (kedro_env)
    (folder / "src").mkdir()
    return folder


def kedro_env(project: Path, mirror: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        KEDRO_DISABLE_TELEMETRY="1",
        DVC_NO_ANALYTICS="1",
        KEDRO_LOGGING_CONFIG=str(project / "logging.yml"),
        CSE_DATA_MIRROR=str(mirror),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
        TQDM_DISABLE="1",
    )
    return env


def kedro_run(pipeline: str, nodes: Sequence[str], params: dict[str, object]) -> list[str]:
    """``kedro run --env paper`` of ``nodes`` of ``pipeline`` with ``params`` on top of the paper's."""
    return [sys.executable, "-m", "kedro", "run", "--env", "paper", "--pipelines", pipeline,
            "--nodes", ",".join(nodes), "--params", ",".join(f"{key}={value}" for key, value in params.items())]


# The paper settings with the raw data forced to the (generated) mirror and the paper's
# encoder replaced by the offline default (same WordPiece vocabulary).
BASE_PARAMS = {"raw_data.mode": "mirror", "encoder": OFFLINE_ENCODER}

_TOKENISED = re.compile(r"tokenised (\d+) documents \((\d+) tokens\)")
_LOADING = re.compile(r"^(\S+) INFO .*Loading data from ")
_NODE_DONE = re.compile(r"^(\S+) INFO .*Completed node: (\w+)")
_TOKEN_KEYS = ("tokens_in", "tokens_tokenised", "tokens_tokenized", "tokens_total")


def node_seconds(log_text: str) -> dict[str, float]:
    """Seconds per node from the timestamped log: from the first load of its inputs to its
    completion (outputs saved), so loading and saving count, kedro's start-up does not."""
    seconds, started = {}, None
    for line in log_text.splitlines():
        if started is None and (match := _LOADING.match(line)):
            started = datetime.fromisoformat(match.group(1))
        elif (match := _NODE_DONE.match(line)) and started is not None:
            seconds[match.group(2)] = round((datetime.fromisoformat(match.group(1)) - started).total_seconds(), 2)
            started = None
    return seconds


def tokens_from_run(project: Path, log_text: str) -> tuple[int | None, str]:
    """Tokens of all documents tokenised by ``build_long_documents``, and where the number
    came from: a ``tokens_in``-like count in its data report, else its log line."""
    report_path = project / "data" / "08_reporting" / "data_report" / "long_documents.json"
    if report_path.is_file():
        report = json.loads(report_path.read_text()).get("long_documents", {})
        for key in _TOKEN_KEYS:
            if isinstance(report.get(key), int):
                return report[key], f"data report long_documents.{key}"
    matches = _TOKENISED.findall(log_text)
    if matches:
        return sum(int(tokens) for _, tokens in matches), "log line 'tokenised N documents (T tokens)'"
    return None, "not reported"


def read_report(project: Path, step: str) -> dict:
    path = project / "data" / "08_reporting" / "data_report" / f"{step}.json"
    return json.loads(path.read_text()).get(step, {}) if path.is_file() else {}


@dataclass
class Row:
    path: str  # documents | sentences
    size: int  # documents or sentences generated
    stage: str  # raw_data | data_processing
    num_proc: int | None
    wall_s: float
    peak_tree_rss_gib: float
    max_process_rss_gib: float
    cpu_s: float
    peak_tree_anon_gib: float | None = None
    peak_tree_pss_gib: float | None = None
    rows_in: int | None = None
    rows_out: int | None = None
    tokens_in: int | None = None
    tokens_source: str = ""
    tokens_per_s: float | None = None  # tokens in / wall s of the whole kedro run
    # tokens in / seconds of the tokenising node (TOKENISING_NODE: reading, normalising,
    # tokenising, filtering, writing), without Kedro's start-up and the span node
    node_tokens_per_s: float | None = None
    rows_per_s: float | None = None
    load_average_1min: float | None = None  # of the machine when the run started (shared machines)
    node_seconds: dict[str, float] = field(default_factory=dict)


def _row(path: str, size: int, stage: str, num_proc: int | None, measured: Measured, load: float) -> Row:
    return Row(path, size, stage, num_proc, measured.wall_s, round(measured.peak_tree_rss_bytes / GIB, 3),
               round(measured.max_process_rss_bytes / GIB, 3), measured.cpu_s,
               peak_tree_anon_gib=round(measured.peak_tree_anon_bytes / GIB, 3),
               peak_tree_pss_gib=round(measured.peak_tree_pss_bytes / GIB, 3), load_average_1min=round(load, 2))


def benchmark_size(path: str, size: int, num_procs: Sequence[int], workdir: Path, mirror: Path,
                   ceiling_tokens: int | None) -> list[Row]:
    """Ingest once, then the path's two nodes at each ``num_procs``; one Row per run."""
    project = scratch_project(workdir / "projects" / f"{path}-{size}")
    env = kedro_env(project, mirror)
    sources = DOCUMENT_SOURCES if path == "documents" else SENTENCE_SOURCES
    nodes = DOCUMENT_NODES if path == "documents" else SENTENCE_NODES
    rows = []
    log = project / "raw_data.log"
    load = os.getloadavg()[0]
    measured = run_measured(kedro_run("raw_data", [f"ingest_{s}" for s in sources], BASE_PARAMS), project, env, log)
    _check(measured, log)
    rows.append(_row(path, size, "raw_data", None, measured, load))
    rows[-1].node_seconds = node_seconds(log.read_text(encoding="utf-8", errors="replace"))
    print(f"  {path} {size}: raw_data {measured.wall_s} s", flush=True)
    for num_proc in num_procs:
        log = project / f"data_processing-np{num_proc}.log"
        params = {**BASE_PARAMS, "data_processing.num_proc": num_proc}
        load = os.getloadavg()[0]
        measured = run_measured(kedro_run("data_processing", nodes, params), project, env, log)
        _check(measured, log)
        row = _row(path, size, "data_processing", num_proc, measured, load)
        log_text = log.read_text(encoding="utf-8", errors="replace")
        row.node_seconds = node_seconds(log_text)
        if path == "documents":
            report = read_report(project, "long_documents")
            row.tokens_in, row.tokens_source = tokens_from_run(project, log_text)
            if row.tokens_in is None and ceiling_tokens is not None:
                row.tokens_in, row.tokens_source = ceiling_tokens, "counted by the ceiling's tokenizer"
            add_rates(row)
        else:
            report = read_report(project, "sentence_candidates")
            row.rows_out = read_report(project, "wiki_sentences").get("rows_out")
        row.rows_in = report.get("rows_in")
        row.rows_out = row.rows_out if row.rows_out is not None else report.get("rows_out")
        if row.rows_in:
            row.rows_per_s = round(row.rows_in / row.wall_s, 1)
        rows.append(row)
        print(f"  {path} {size}: num_proc={num_proc} {row.wall_s} s, peak RSS {row.peak_tree_rss_gib} GiB (anonymous {row.peak_tree_anon_gib}, PSS {row.peak_tree_pss_gib}), "
              f"{row.tokens_per_s or '-'} tokens/s, {row.rows_per_s} rows/s", flush=True)
    return rows


def add_rates(row: Row) -> Row:
    """A documents run's tokens/s over the whole run and over the tokenising node."""
    if row.tokens_in is not None:
        row.tokens_per_s = round(row.tokens_in / row.wall_s)
        if row.node_seconds.get(TOKENISING_NODE):
            row.node_tokens_per_s = round(row.tokens_in / row.node_seconds[TOKENISING_NODE])
    return row


def _check(measured: Measured, log: Path) -> None:
    if measured.returncode:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
        raise RuntimeError(f"kedro run failed (exit {measured.returncode}), see {log}:\n{tail}")


# --- the ceiling: the fast tokenizer alone ---------------------------------------------

_worker_tokenizer = None


def _start_tokenizer(encoder: str, threaded: bool) -> None:
    global _worker_tokenizer
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threaded else "false"
    if not threaded:
        os.environ["RAYON_NUM_THREADS"] = "1"
    sys.path.insert(0, str(REPO / "src"))
    from contrastive_sentence_embeddings.encoders.loading import load_tokenizer

    _worker_tokenizer = load_tokenizer(encoder)


def _count_tokens(texts: list[str]) -> int:
    from contrastive_sentence_embeddings.data.documents import encode_texts  # the pipeline's own call

    return sum(map(len, encode_texts(texts, _worker_tokenizer)))


def _batches(path: Path, size: int, limit: int | None = None) -> Iterator[list[str]]:
    """The non-empty lines of ``path`` (the first ``limit``), in lists of ``size``."""
    batch = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if limit is not None and number >= limit:
                break
            if text := line.strip():
                batch.append(text)
                if len(batch) == size:
                    yield batch
                    batch = []
    if batch:
        yield batch


def tokenizer_ceiling(path: Path, encoder: str, processes: int, threaded: bool, limit: int | None = None) -> dict:
    """Tokens/s of the fast tokenizer alone over the (first ``limit``) lines of ``path``, in batches of
    ``CEILING_BATCH``, on ``processes`` worker processes (single-threaded unless
    ``threaded``); the tokenizer load is not timed, reading and handing out the text is."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes, initializer=_start_tokenizer, initargs=(encoder, threaded)) as pool:
        pool.map(_count_tokens, [["warm up"]] * processes)
        start = time.perf_counter()
        counts = list(pool.imap(_count_tokens, _batches(path, CEILING_BATCH, limit), chunksize=1))
        seconds = time.perf_counter() - start
    tokens = sum(counts)
    documents = sum(1 for _ in _batches(path, 1, limit))
    return {"processes": processes, "threaded": threaded, "documents": documents, "tokens": tokens,
            "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds)}


# --- extrapolation and targets ---------------------------------------------------------


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Least-squares ``y = constant + slope * x``; None with fewer than two distinct x."""
    if len(set(xs)) < 2:
        return None
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y - slope * mean_x, slope


def extrapolate(rows: list[Row], ceilings: list[dict], cores: int) -> dict:
    """Paper-scale time at the measured rates and peak RSS from a linear fit per path
    and ``num_proc`` (documents: against tokens in; sentences: against sentences)."""
    out: dict = {"paper": {"documents_in": PAPER_DOCUMENTS_IN, "tokens_in": PAPER_TOKENS_IN,
                           "documents_kept": PAPER_DOCUMENTS_KEPT, "sentences": PAPER_SENTENCES},
                 "documents": {}, "sentences": {}}
    runs = [r for r in rows if r.stage == "data_processing"]
    for num_proc in sorted({r.num_proc for r in runs}):
        docs = sorted((r for r in runs if r.path == "documents" and r.num_proc == num_proc and r.tokens_in),
                      key=lambda r: r.size)
        if docs:
            largest = docs[-1]
            entry = {"tokens_per_s": largest.tokens_per_s, "at_size": largest.size,
                     "hours": round(PAPER_TOKENS_IN / largest.tokens_per_s / 3600, 1)}
            for measure in MEMORY_MEASURES:
                fit = linear_fit([r.tokens_in for r in docs if getattr(r, f"peak_tree_{measure}_gib")],
                                 [getattr(r, f"peak_tree_{measure}_gib") for r in docs if getattr(r, f"peak_tree_{measure}_gib")])
                if fit:
                    entry[f"{measure}_fit"] = {"constant_gib": round(fit[0], 3),
                                               "gib_per_million_tokens": round(fit[1] * 1e6, 4),
                                               "bytes_per_token": round(fit[1] * GIB, 1), "sizes": [r.size for r in docs]}
                    entry[f"peak_{measure}_gib"] = round(fit[0] + fit[1] * PAPER_TOKENS_IN, 1)
            out["documents"][f"num_proc={num_proc}"] = entry
        sents = sorted((r for r in runs if r.path == "sentences" and r.num_proc == num_proc and r.rows_per_s),
                       key=lambda r: r.size)
        if sents:
            largest = sents[-1]
            entry = {"sentences_per_s": largest.rows_per_s, "at_size": largest.size,
                     "minutes": round(PAPER_SENTENCES / largest.rows_per_s / 60, 1)}
            for measure in MEMORY_MEASURES:
                fit = linear_fit([r.size for r in sents if getattr(r, f"peak_tree_{measure}_gib")],
                                 [getattr(r, f"peak_tree_{measure}_gib") for r in sents if getattr(r, f"peak_tree_{measure}_gib")])
                if fit:
                    entry[f"{measure}_fit"] = {"constant_gib": round(fit[0], 3),
                                               "gib_per_million_sentences": round(fit[1] * 1e6, 3),
                                               "sizes": [r.size for r in sents]}
                    entry[f"peak_{measure}_gib"] = round(fit[0] + fit[1] * PAPER_SENTENCES, 2)
            out["sentences"][f"num_proc={num_proc}"] = entry
    # N cores: the best measured rate per worker process, times N (linear scaling assumed).
    per_worker = [r.tokens_per_s / r.num_proc for r in runs if r.path == "documents" and r.tokens_per_s]
    if per_worker:
        out["documents"][f"{cores}_cores_linear"] = {
            "tokens_per_s": round(max(per_worker) * cores),
            "hours": round(PAPER_TOKENS_IN / (max(per_worker) * cores) / 3600, 2)}
    for ceiling in ceilings:
        key = f"ceiling_{ceiling['processes']}proc{'_threaded' if ceiling['threaded'] else ''}"
        out["documents"].setdefault(key, {"tokens_per_s": ceiling["tokens_per_s"],
                                          "hours": round(PAPER_TOKENS_IN / ceiling["tokens_per_s"] / 3600, 1)})
    return out


def check_targets(rows: list[Row], ceilings: list[dict], extrapolation: dict) -> list[dict]:
    """The issue's targets, each passed True/False, or None where not measured."""
    runs = [r for r in rows if r.stage == "data_processing"]
    docs = [r for r in runs if r.path == "documents"]
    results = []

    def target(name: str, passed: bool | None, detail: str) -> None:
        results.append({"target": name, "passed": passed, "detail": detail})

    sizes = sorted({r.size for r in docs})
    # judged on the tree's PSS where measured: RSS summed over a parent and the workers
    # it forked counts every page they share once per process (shown beside it)
    measure = "pss" if docs and all(r.peak_tree_pss_gib for r in docs) else "rss"
    name = f"documents peak memory ({measure.upper()} of the process tree) grows < 20% from 2k to 40k documents and stays < 2 GiB"
    if len(sizes) >= 2:
        details, passed = [], True
        for num_proc in sorted({r.num_proc for r in docs}):
            by_size = {r.size: getattr(r, f"peak_tree_{measure}_gib") for r in docs if r.num_proc == num_proc}
            rss = {r.size: r.peak_tree_rss_gib for r in docs if r.num_proc == num_proc}
            if len(by_size) < 2:
                continue
            small, large = by_size[min(by_size)], by_size[max(by_size)]
            growth = large / small - 1
            ok = growth < 0.20 and max(by_size.values()) < 2.0
            passed &= ok
            details.append(f"num_proc={num_proc}: {small:.2f} -> {large:.2f} GiB ({growth:+.0%}) "
                           f"from {min(by_size)} to {max(by_size)} documents (RSS summed: "
                           f"{rss[min(rss)]:.2f} -> {rss[max(rss)]:.2f} GiB)")
        partial = "" if {2000, 40000} <= set(sizes) else " [sizes measured do not span 2k-40k]"
        target(name, passed, "; ".join(details) + partial)
    else:
        target(name, None, "needs two document sizes")

    # judged on the tokenising node's rate where the log gave its time (the ceiling does
    # not time a process start either), with the whole run's rate beside it
    def rate(r: Row) -> float | None:
        return r.node_tokens_per_s or r.tokens_per_s

    pairs, whole = {}, {}
    for r in docs:
        if rate(r):
            pairs.setdefault(r.size, {})[r.num_proc] = rate(r)
            whole.setdefault(r.size, {})[r.num_proc] = r.tokens_per_s
    both = [size for size, by in pairs.items() if 1 in by and 2 in by]
    name = "tokens/s with 2 workers >= 1.7x one worker (tokenising node)"
    if both:
        size = max(both)
        ratio = pairs[size][2] / pairs[size][1]
        target(name, ratio >= 1.7, f"{ratio:.2f}x at {size} documents ({pairs[size][2]:,} vs {pairs[size][1]:,}; "
                                   f"whole run {whole[size][2] / whole[size][1]:.2f}x)")
    else:
        target(name, None, "needs num_proc 1 and 2 at one size")

    name = "tokens/s with 2 workers >= 80% of the fast tokenizer alone on 2 cores (tokenising node)"
    two_core = [c["tokens_per_s"] for c in ceilings if c["processes"] == 2 or (c["processes"] == 1 and c["threaded"])]
    two_workers = [r for r in docs if r.num_proc == 2 and rate(r)]
    if two_core and two_workers:
        best = max(two_workers, key=lambda r: r.size)
        share = rate(best) / max(two_core)
        target(name, share >= 0.8, f"{share:.0%} ({rate(best):,} vs {max(two_core):,} tokens/s) at {best.size} "
                                   f"documents (whole run {best.tokens_per_s / max(two_core):.0%})")
    else:
        target(name, None, "needs num_proc 2 and the ceiling (not --skip-ceiling)")

    name = "extrapolated paper-scale data preparation fits in 16 GiB (PSS fit where measured)"
    estimates = {f"{path} {key}": entry.get("peak_pss_gib", entry.get("peak_rss_gib"))
                 for path in ("documents", "sentences")
                 for key, entry in extrapolation[path].items() if "peak_rss_gib" in entry or "peak_pss_gib" in entry}
    if estimates:
        target(name, max(estimates.values()) < 16,
               "; ".join(f"{key}: {value} GiB" for key, value in estimates.items()))
    else:
        target(name, None, "needs two sizes of a path for the RSS fit")
    target("offline default's results unchanged", None,
           "not checked here: compare data/08_reporting/data_report and the leaderboard before/after")
    return results


# --- report ----------------------------------------------------------------------------


def git_commit() -> str:
    if str(REPO / "src") not in sys.path:  # as the tokenizer workers do: the package may not be installed
        sys.path.insert(0, str(REPO / "src"))
    from contrastive_sentence_embeddings.records.provenance import results_commit

    return results_commit(REPO)


def machine_info() -> dict:
    import psutil
    from importlib.metadata import version

    versions = {name: version(name) for name in ("kedro", "transformers", "tokenizers", "datasets", "pyarrow", "pandas")}
    return {
        "cpu_count": os.cpu_count(), "cores_available": len(os.sched_getaffinity(0)),
        "ram_gib": round(psutil.virtual_memory().total / GIB, 1), "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(), "platform": platform.platform(), "versions": versions,
        "git_commit": git_commit(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def markdown(rows: list[Row], ceilings: list[dict], extrapolation: dict, targets: list[dict]) -> str:
    lines = ["| path | size | stage | num_proc | wall s | nodes s | peak RSS tree GiB | peak PSS tree GiB "
             "| max process GiB | CPU s | rows in | rows out | tokens in | tokens/s | node tokens/s | rows/s | load |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.path} | {r.size:,} | {r.stage} | {r.num_proc if r.num_proc is not None else '-'} "
                     f"| {r.wall_s} | {round(sum(r.node_seconds.values()), 1) if r.node_seconds else '-'} | {r.peak_tree_rss_gib} | {_n(r.peak_tree_pss_gib)} | {r.max_process_rss_gib} | {r.cpu_s} "
                     f"| {_n(r.rows_in)} | {_n(r.rows_out)} | {_n(r.tokens_in)} | {_n(r.tokens_per_s)} | {_n(r.node_tokens_per_s)} "
                     f"| {_n(r.rows_per_s)} | {r.load_average_1min} |")
    if ceilings:
        lines += ["", "| fast tokenizer alone | tokens | seconds | tokens/s |", "|---|---:|---:|---:|"]
        for c in ceilings:
            how = f"{c['processes']} process{'es' if c['processes'] > 1 else ''}, " + (
                "tokenizer threads on" if c["threaded"] else "single-threaded")
            lines.append(f"| {how} ({c['documents']:,} documents) | {c['tokens']:,} | {c['seconds']} "
                         f"| {c['tokens_per_s']:,} |")
    lines += ["", "| paper scale (extrapolated) | rate | time | peak RSS GiB (fit) | peak PSS GiB (fit) |",
              "|---|---:|---:|---:|---:|"]
    for path in ("documents", "sentences"):
        for key, entry in extrapolation[path].items():
            rate = entry.get("tokens_per_s") or entry.get("sentences_per_s")
            unit = "tokens/s" if "tokens_per_s" in entry else "sentences/s"
            when = f"{entry['hours']} h" if "hours" in entry else f"{entry['minutes']} min"
            lines.append(f"| {path} {key} | {rate:,} {unit} | {when} | {entry.get('peak_rss_gib', '-')} "
                         f"| {entry.get('peak_pss_gib', '-')} |")
    lines += ["", "| target | result | measured |", "|---|---|---|"]
    for t in targets:
        result = {True: "PASS", False: "FAIL", None: "not measured"}[t["passed"]]
        lines.append(f"| {t['target']} | {result} | {t['detail']} |")
    return "\n".join(lines)


def _n(value) -> str:
    return "-" if value is None else f"{value:,}"


def write_results(report: dict, rows: list[Row]) -> None:
    from contrastive_sentence_embeddings.runs.atomic_files import replaced_atomically, write_text_atomically

    write_text_atomically(RESULTS_JSON, json.dumps(report, indent=2) + "\n")
    columns = [name for name in Row.__dataclass_fields__ if name != "node_seconds"] + ["node_seconds"]
    with replaced_atomically(RESULTS_CSV) as temporary, temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({**asdict(row), "node_seconds": json.dumps(row.node_seconds)})


# --- main ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[2000, 10000, 40000],
                        help="numbers of synthetic documents (documents path)")
    parser.add_argument("--sentences", type=int, nargs="*", default=[100000, 1000000],
                        help="numbers of synthetic sentences (sentences path)")
    parser.add_argument("--num-proc", type=int, nargs="+", default=[1, 2], help="data_processing.num_proc values")
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: a new one under the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data and scratch projects")
    parser.add_argument("--skip-ceiling", action="store_true", help="do not measure the tokenizer alone")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 200 and 400 documents, 5,000 and 10,000 sentences")
    parser.add_argument("--ceiling-documents", type=int, default=2000,
                        help="documents the tokenizer-alone ceiling reads (of the smallest size)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cores", type=int, default=16, help="core count of the linear N-core extrapolation")
    parser.add_argument("--source-mirror", type=Path, default=SOURCE_MIRROR,
                        help="the offline mirror whose Wikipedia text is recombined")
    parser.add_argument("--results", type=Path, help="write the JSON here instead of benchmarks/results")
    parser.add_argument("--reanalyse", type=Path, metavar="JSON",
                        help="run nothing: recompute the rates, extrapolation and targets of a saved results "
                             "JSON (e.g. after this script's analysis changed) and write them to --results "
                             "(default: the same file)")
    args = parser.parse_args(argv)
    if args.reanalyse:
        reanalyse(args.reanalyse, args.results or args.reanalyse)
        return
    if args.quick:
        args.sizes, args.sentences = [200, 400], [5000, 10000]
    global RESULTS_JSON, RESULTS_CSV
    if args.results:
        RESULTS_JSON, RESULTS_CSV = args.results, args.results.with_suffix(".csv")
    logging.basicConfig(level=logging.WARNING)

    made_workdir = args.workdir is None or not args.workdir.exists()
    workdir = Path(tempfile.mkdtemp(prefix="cse-data-scale-")) if args.workdir is None else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    created: list[Path] = []
    print(f"scratch folder: {workdir}", flush=True)
    info = machine_info()
    rows: list[Row] = []
    ceilings: list[dict] = []
    try:
        for path, sizes in (("documents", args.sizes), ("sentences", args.sentences)):
            for size in sorted(sizes):
                mirror = workdir / "mirrors" / f"{path}-{size}"
                project = workdir / "projects" / f"{path}-{size}"
                for folder in (mirror, project):
                    if folder.exists():
                        raise FileExistsError(f"{folder} exists: choose another --workdir or remove it")
                created += [mirror, project]
                start = time.perf_counter()
                write_mirror(mirror, args.source_mirror, args.seed,
                             documents=size if path == "documents" else 0,
                             sentences=size if path == "sentences" else 0)
                print(f"generated {size:,} {path} in {time.perf_counter() - start:.0f} s: {mirror}", flush=True)
                ceiling_tokens = None
                if path == "documents" and not args.skip_ceiling and not ceilings:
                    # once, on the smallest size's first documents: the rate does not depend on the size
                    for processes, threaded in ((1, False), (2, False), (1, True)):
                        ceiling = tokenizer_ceiling(mirror / OPENWEBTEXT_FILE, OFFLINE_ENCODER, processes,
                                                    threaded, args.ceiling_documents)
                        ceilings.append(ceiling)
                        if ceiling["documents"] == size:
                            ceiling_tokens = ceiling["tokens"]
                        print(f"  ceiling {processes} process(es){' threaded' if threaded else ''}: "
                              f"{ceiling['tokens_per_s']:,} tokens/s", flush=True)
                rows += benchmark_size(path, size, args.num_proc, workdir, mirror, ceiling_tokens)
                save_report(args, argv, info, rows, ceilings, complete=False)
                if not args.keep:
                    for folder in (mirror, project):
                        shutil.rmtree(folder)
    finally:
        if not args.keep:
            for folder in created:
                if folder.exists():
                    shutil.rmtree(folder)
            for parent in (workdir / "mirrors", workdir / "projects", workdir if made_workdir else None):
                if parent is not None and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
        else:
            print(f"kept: {workdir}")
    report = save_report(args, argv, info, rows, ceilings, complete=True)
    print(markdown(rows, ceilings, report["extrapolation"], report["targets"]))
    print(f"\nwritten: {RESULTS_JSON.relative_to(REPO) if RESULTS_JSON.is_relative_to(REPO) else RESULTS_JSON}")


def reanalyse(saved: Path, target: Path) -> None:
    """Recompute a saved run's derived numbers with this script's analysis."""
    global RESULTS_JSON, RESULTS_CSV
    report = json.loads(saved.read_text())
    known = set(Row.__dataclass_fields__)
    rows = [Row(**{k: v for k, v in run.items() if k in known}) for run in report["runs"]]
    for row in rows:
        if row.path == "documents" and row.stage == "data_processing":
            add_rates(row)
    cores = report.get("cores_extrapolated", 16)
    report["runs"] = [asdict(r) for r in rows]
    report["extrapolation"] = extrapolate(rows, report["ceiling"], cores)
    report["targets"] = check_targets(rows, report["ceiling"], report["extrapolation"])
    report["reanalysed"] = {"from": str(saved), "by_commit": git_commit()}
    RESULTS_JSON, RESULTS_CSV = target, target.with_suffix(".csv")
    write_results(report, rows)
    print(markdown(rows, report["ceiling"], report["extrapolation"], report["targets"]))


def save_report(args: argparse.Namespace, argv: Sequence[str] | None, info: dict, rows: list[Row],
                ceilings: list[dict], complete: bool) -> dict:
    """Write the results so far (after every size, so an interrupted run leaves them)."""
    from contrastive_sentence_embeddings.runs.project_paths import recorded_command

    extrapolation = extrapolate(rows, ceilings, args.cores)
    report = {
        "what": "data_processing with the paper's data settings (kedro run --env paper) on synthetic "
                "OpenWebText-like documents and wiki1m-like sentences; see docs/record/data_scale.md",
        "command": recorded_command(__file__, list(argv if argv is not None else sys.argv[1:]),
                                    Path(__file__).resolve().parents[1]),
        "complete": complete,
        "machine": {**info, "load_average_at_end": os.getloadavg()}, "encoder": OFFLINE_ENCODER,
        "seed": args.seed, "document_words": DOCUMENT_WORDS, "rss_poll_seconds": POLL_SECONDS,
        "cores_extrapolated": args.cores,
        "runs": [asdict(r) for r in rows], "ceiling": ceilings,
        "extrapolation": extrapolation, "targets": check_targets(rows, ceilings, extrapolation),
    }
    write_results(report, rows)
    return report

if __name__ == "__main__":
    main()
