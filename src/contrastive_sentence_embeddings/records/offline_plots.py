"""An HTML page template for ``dvc plots show`` that needs no network.

DVC's own page loads vega, vega-lite and vega-embed from a CDN, so offline its charts
are blank. ``make install`` runs this module: it fetches the very versions DVC's page
names (read from the installed ``dvc_render``, so they always match the vega-lite schema
of DVC's templates) from the npm registry with ``npm pack``, inlines each package's
browser build into a page template, and ``dvc config --local plots.html_template``
points DVC at it. Every ``dvc plots show`` then writes a self-contained
``dvc_plots/index.html`` that renders anywhere, offline, and can be mailed as it is.

Without npm (or without the registry), nothing is written and DVC keeps its own page,
which renders when the CDN can be reached; the command says so and exits with 1.

    python -m contrastive_sentence_embeddings.records.offline_plots .venv/share/dvc_plots_page.html
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically

# The placeholders dvc_render's page template fills; the page keeps two of them and
# leaves out {scripts}, where DVC would put its CDN script tags.
PLOTS_PLACEHOLDER = "{plot_divs}"
REFRESH_PLACEHOLDER = "{refresh_tag}"
SCRIPTS_PLACEHOLDER = "{scripts}"


class OfflinePlotsError(RuntimeError):
    """The offline page cannot be built; the message says why."""


def dvc_vega_packages(scripts_html: str) -> list[str]:
    """The npm packages (``name@version``) that DVC's page loads, in its order, from its
    script tags (``dvc_render.vega.VegaRenderer.SCRIPTS``)."""
    packages = re.findall(r"""<script[^>]*\bsrc\s*=\s*["'][^"']*/npm/((?:@[\w.-]+/)?[\w.-]+@[\w.+-]+)[^"']*["']""",
                          scripts_html)
    if not packages:
        raise OfflinePlotsError("found no npm package in DVC's vega script tags (has dvc_render changed how it "
                                f"loads vega?): {scripts_html.strip()!r}")
    return packages


def installed_dvc_vega_packages() -> list[str]:
    from dvc_render.vega import VegaRenderer

    return dvc_vega_packages(VegaRenderer.SCRIPTS)


def browser_build(package_json: Mapping) -> str:
    """The file a CDN serves for a package's bare URL (``jsdelivr``, else ``unpkg``,
    else ``browser`` when it is a path): the stand-alone browser build."""
    for field in ("jsdelivr", "unpkg", "browser"):
        value = package_json.get(field)
        if isinstance(value, str) and value:
            return value.removeprefix("./")
    raise OfflinePlotsError(f"{package_json.get('name', 'a package')}: its package.json names no browser build "
                            "(jsdelivr, unpkg or browser)")


def read_browser_build(tarball: Path) -> str:
    """The browser build's text from an npm package tarball, read in memory (nothing is
    extracted to disk)."""
    with tarfile.open(tarball, "r:gz") as archive:
        manifest = json.load(archive.extractfile("package/package.json"))
        member = f"package/{browser_build(manifest)}"
        try:
            handle = archive.extractfile(member)
        except KeyError:
            handle = None
        if handle is None:
            raise OfflinePlotsError(f"{tarball.name}: {member} (its package.json's browser build) "
                                    "is not in the package")
        return handle.read().decode("utf-8")


def npm_pack(packages: list[str], folder: Path, npm: str | None = None) -> dict[str, Path]:
    """``npm pack`` each package into ``folder`` (npm checks each tarball's integrity
    against the registry and caches it): ``{package: tarball}``."""
    npm = npm or shutil.which("npm")
    if npm is None:
        raise OfflinePlotsError("npm is not installed (Node.js's package manager, e.g. `apt-get install npm`)")
    # --prefer-offline: a package in npm's cache is not fetched again; one retry, so an
    # offline install fails in seconds rather than after npm's long default backoff.
    command = [npm, "pack", "--json", "--silent", "--prefer-offline", "--fetch-retries=1", *packages]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OfflinePlotsError(f"`npm pack {' '.join(packages)}` failed (exit {done.returncode}): "
                                f"{_npm_error(done.stdout, done.stderr)}")
    packed = json.loads(done.stdout)
    if len(packed) != len(packages):
        raise OfflinePlotsError(f"`npm pack` gave {len(packed)} tarballs for {len(packages)} packages")
    return {package: folder / entry["filename"] for package, entry in zip(packages, packed)}


def _npm_error(stdout: str, stderr: str) -> str:
    """npm's own summary of a failure (with --json it is a JSON object on stdout)."""
    try:
        error = json.loads(stdout)["error"]
        return " ".join(str(error.get(key, "")) for key in ("code", "summary")).strip()
    except (ValueError, KeyError, TypeError, AttributeError):
        lines = (stderr.strip() or stdout.strip()).splitlines()
        return " | ".join(lines[-3:])


def page_template(scripts: Mapping[str, str]) -> str:
    """A dvc_render page template with each script inlined (``{package: javascript}``,
    in load order) and no ``{scripts}`` placeholder, so DVC adds no CDN script tag."""
    blocks = []
    for package, code in scripts.items():
        for placeholder in (PLOTS_PLACEHOLDER, REFRESH_PLACEHOLDER, SCRIPTS_PLACEHOLDER):
            if placeholder in code:  # DVC would replace it inside the script
                raise OfflinePlotsError(f"{package}'s script contains DVC's placeholder {placeholder}")
        if re.search(r"<!--|</script", code, re.IGNORECASE):  # would end or garble the inline script
            raise OfflinePlotsError(f"{package}'s script contains '</script' or '<!--' and cannot be inlined")
        blocks.append(f"<script>/* {package}, inlined from its npm package */\n{code}\n</script>")
    names = ", ".join(scripts)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{REFRESH_PLACEHOLDER}
<title>DVC plots</title>
<!-- Written by `python -m contrastive_sentence_embeddings.records.offline_plots` (make install): {names}
     inlined, so this page renders without a network. -->
{chr(10).join(blocks)}
<style>
  body {{ font-family: sans-serif; margin: 1.5em; }}
  body > div {{ margin-bottom: 2em; }}
  table {{ border-spacing: 15px; }}
</style>
</head>
<body>
{PLOTS_PLACEHOLDER}
</body>
</html>
"""


def build_page(output: Path, packages: list[str] | None = None, npm: str | None = None) -> list[str]:
    """Fetch ``packages`` (default: DVC's) and write the page template to ``output``;
    the packages it inlined."""
    packages = packages or installed_dvc_vega_packages()
    with tempfile.TemporaryDirectory(prefix="dvc-plots-page-") as folder:
        tarballs = npm_pack(packages, Path(folder), npm)
        scripts = {package: read_browser_build(tarballs[package]) for package in packages}
    write_text_atomically(output, page_template(scripts))
    return packages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="the page template to write (e.g. .venv/share/dvc_plots_page.html)")
    args = parser.parse_args(argv)
    try:
        packages = build_page(args.output)
    except OfflinePlotsError as error:
        print(f"dvc plots show: no offline page ({error}); DVC's own page is used, which loads vega from a CDN "
              "and is blank without a network", file=sys.stderr)
        return 1
    print(f"{args.output}: DVC's plot page with {', '.join(packages)} inlined (no network needed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
