"""``dvc plots show`` without a network: the page template ``make install`` writes
(records/offline_plots.py) inlines vega, vega-lite and vega-embed, in the versions DVC's own page
loads, and DVC's page through it loads no script from anywhere."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from contrastive_sentence_embeddings.records import offline_plots
from contrastive_sentence_embeddings.records.offline_plots import (
    OfflinePlotsError,
    dvc_vega_packages,
    installed_dvc_vega_packages,
    page_template,
    read_browser_build,
)
from tests.helpers import PROJECT_ROOT

# What make install writes and .dvc/config.local names (Makefile: PLOTS_PAGE).
INSTALLED_PAGE = PROJECT_ROOT / ".venv" / "share" / "dvc_plots_page.html"
SCRIPT_SOURCE = re.compile(r"<script\b[^>]*\bsrc\s*=", re.IGNORECASE)


def remote_script_sources(html: str) -> list[str]:
    return re.findall(r"""<script\b[^>]*\bsrc\s*=\s*["']?(https?:[^"' >]+)""", html, re.IGNORECASE)


def test_the_packages_are_those_dvcs_own_page_loads():
    from dvc_render.vega import VegaRenderer

    packages = installed_dvc_vega_packages()
    assert [p.rsplit("@", 1)[0] for p in packages] == ["vega", "vega-lite", "vega-embed"]
    for package in packages:  # each the exact version DVC's page names
        name, version = package.rsplit("@", 1)
        assert f"/npm/{name}@{version}" in VegaRenderer.SCRIPTS
    assert dvc_vega_packages('<script src="https://cdn.example/npm/@scope/lib@1.2.3/dist/x.js"></script>') == [
        "@scope/lib@1.2.3"]
    with pytest.raises(OfflinePlotsError, match="no npm package in DVC's vega script tags"):
        dvc_vega_packages("<script>vega()</script>")


def test_the_page_inlines_the_scripts_and_leaves_dvc_no_place_for_its_own():
    page = page_template({"vega@5": "var vega = 1;", "vega-embed@6": "var vegaEmbed = 2;"})
    assert "var vega = 1;" in page and page.index("var vega = 1;") < page.index("var vegaEmbed = 2;")
    assert "{plot_divs}" in page and "{refresh_tag}" in page and "{scripts}" not in page
    assert not SCRIPT_SOURCE.search(page)


@pytest.mark.parametrize(("code", "message"), [
    ("s = '</script>'", "cannot be inlined"),
    ("s = '<!--'", "cannot be inlined"),
    ("s = '{plot_divs}'", r"placeholder \{plot_divs\}"),
])
def test_a_script_that_cannot_be_inlined_is_refused(code, message):
    with pytest.raises(OfflinePlotsError, match=message):
        page_template({"lib@1": code})


def npm_tarball(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_the_browser_build_is_the_file_the_cdn_serves(tmp_path):
    manifest = {"name": "lib", "main": "build/lib-node.js", "jsdelivr": "build/lib.min.js"}
    tarball = npm_tarball(tmp_path / "lib-1.0.0.tgz", {"package.json": json.dumps(manifest),
                                                        "build/lib.min.js": "browser()", "build/lib-node.js": "node()"})
    assert read_browser_build(tarball) == "browser()"
    broken = npm_tarball(tmp_path / "broken-1.0.0.tgz", {"package.json": json.dumps(manifest)})
    with pytest.raises(OfflinePlotsError, match=r"broken-1\.0\.0\.tgz: package/build/lib\.min\.js .* not in the"):
        read_browser_build(broken)
    nothing = npm_tarball(tmp_path / "n-1.tgz", {"package.json": json.dumps({"name": "n", "main": "n.js"})})
    with pytest.raises(OfflinePlotsError, match="n: its package.json names no browser build"):
        read_browser_build(nothing)


def test_without_npm_nothing_is_written_and_the_reason_is_given(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(offline_plots.shutil, "which", lambda name: None)
    page = tmp_path / "page.html"
    assert offline_plots.main([str(page)]) == 1
    assert not page.exists()
    assert "npm is not installed" in capsys.readouterr().err


def dvc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not INSTALLED_PAGE.is_file(), reason=f"{INSTALLED_PAGE} is written by `make install` (needs npm)")
def test_dvc_plots_show_through_the_installed_page_loads_nothing_from_the_network(tmp_path):
    """The repository's own plots, rendered as `dvc plots show` does with .dvc/config.local
    naming the page: no remote script, the three libraries inline, and every train
    stage's chart with numbers in every plotted cell (no '' that vega draws as 0)."""
    page = INSTALLED_PAGE.read_text(encoding="utf-8")
    assert remote_script_sources(page) == [] and "{scripts}" not in page
    for package in installed_dvc_vega_packages():
        assert f"/* {package}, inlined" in page

    out = tmp_path / "plots"
    done = dvc("plots", "show", "--html-template", str(INSTALLED_PAGE), "-o", str(out), cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stdout + done.stderr, done.stderr  # e.g. a plot file that no stage writes
    html = (out / "index.html").read_text(encoding="utf-8")
    assert remote_script_sources(html) == [] and "cdn.jsdelivr" not in html
    specs = [json.loads(spec) for spec in re.findall(r"var spec = (\{.*?\});\n\s*vegaEmbed", html, re.DOTALL)]
    def encoding(spec):  # the loss chart is faceted by term: its encoding is its inner spec's
        return spec.get("encoding") or spec["spec"]["encoding"]

    # Each run's live log (DVCLive's TSVs, a chart per file, titled by its path): drawn at
    # the file's own steps, never at DVC's row numbers.
    live = [spec for spec in specs if spec["title"]["text"].startswith("data/08_reporting/live/")]
    specs = [spec for spec in specs if spec not in live]
    tracked = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters.yml").read_text())["dvc"]["train"]
    live_files = {spec["title"]["text"] for spec in live}
    for method in tracked:
        assert any(f.startswith(f"data/08_reporting/live/{method}/") and f.endswith("/train/loss.tsv")
                   for f in live_files), method
    for spec in live:
        with (PROJECT_ROOT / spec["title"]["text"]).open() as stream:
            on_disk = [line.split("\t")[0] for line in stream.read().splitlines()[1:]]
        assert [str(row["step"]) for row in spec["data"]["values"]] == on_disk, spec["title"]["text"]
        assert spec["encoding"]["x"]["field"] == "step"

    charts = {spec["title"]["text"].split(":")[0] + ":" + encoding(spec)["y"]["field"]: spec for spec in specs}
    assert set(charts) == {f"{method}:{y}" for method in tracked for y in ("value", "dev/selection")}
    for name, spec in charts.items():
        y = encoding(spec)["y"]["field"]
        values = [row[y] for row in spec["data"]["values"]]
        assert values and all(value != "" for value in values), name
    for method in tracked:
        # Each term of the loss in its own panel; one kept step ringed per seed on the dev chart.
        terms = {row["term"] for row in charts[f"{method}:value"]["data"]["values"]}
        assert "loss" in terms and len(terms) >= 2, terms
        assert charts[f"{method}:value"]["facet"]["row"]["field"] == "term"
        dev_rows = charts[f"{method}:dev/selection"]["data"]["values"]
        kept = [row for row in dev_rows if float(row["dev/kept"]) == 1]
        assert len(kept) == len({row.get("seed") for row in dev_rows}), kept
