"""`sbuf evaluate`: retrieval quality, on the checked-in corpus or on the user's own questions.

Without options it runs the checked-in corpus (as the reference does) and exits 1 when the report
fails its thresholds. With `--queries FILE` it scores the selected store against the questions in
FILE. The report is JSON when stdout is not a terminal (or with `--json`), a table otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .context import current, fail
from .failures import failing
from .main import command
from .text import one_line

SIGN_OF_LIFE_S = 5.0


@command("evaluate", help="Run the checked-in retrieval evaluation corpus, or score the store against your questions.")
@click.option(
    "--queries",
    "queries_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Score the selected store against FILE: JSON (an array, or one object a line) of "
    '{"query": "...", "expected": ["<record id>", ...]}.',
)
@click.option(
    "-k",
    "k",
    type=click.IntRange(1, 100),
    default=5,
    show_default=True,
    help="Cut-off for recall@k and for the records listed above a miss (--queries).",
)
@click.option(
    "--mode",
    type=click.Choice(["hybrid", "lexical", "semantic"]),
    default="hybrid",
    show_default=True,
    help="Retrieval mode for --queries.",
)
@click.option("--json/--text", "as_json", default=None,
              help="Print the report as JSON, or as text (default: JSON unless stdout is a terminal).")  # fmt: skip
def evaluate(queries_file: Path | None, k: int, mode: str, as_json: bool | None) -> None:
    cli = current()
    if as_json is None:
        as_json = not sys.stdout.isatty()
    cli.machine_mode = as_json
    if queries_file is None:
        report = _corpus_report()
        click.echo(json.dumps(report, indent=2, ensure_ascii=False) if as_json else _corpus_text(report))
        if not report["passed"]:
            raise click.exceptions.Exit(1)
        return
    report = _questions_report(queries_file, k, mode)
    click.echo(json.dumps(report, indent=2, ensure_ascii=False) if as_json else _questions_text(report))


def _corpus_report() -> dict[str, Any]:
    from ..embedding import EmbedderInitError, ModelUnavailable, acquire_model, load_embedder
    from ..evaluation.corpus import run_corpus

    cache_dir = current().dirs().shared_cache
    try:
        acquire_model(cache_dir)
        embedder = load_embedder(cache_dir)
    except (ModelUnavailable, EmbedderInitError) as exc:
        fail(f"could not run the evaluation: the local embedding model is unavailable: {exc}")
    click.echo("evaluating the retrieval corpus in three modes…", err=True)
    with failing("could not run the evaluation"):
        return run_corpus(embedder)


def _questions_report(queries_file: Path, k: int, mode: str) -> dict[str, Any]:
    from ..core.repository import Repository
    from ..evaluation.questions import QuestionsError, evaluate_questions, read_questions
    from .index import _prepared

    try:
        questions = read_questions(queries_file.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"could not read the questions file: {exc.strerror or type(exc).__name__}")
    except UnicodeDecodeError:
        fail("could not read the questions file: it is not UTF-8 text")
    except QuestionsError as exc:
        fail(f"invalid questions file: {exc}")
    stores, embedder, fallback = _prepared("could not evaluate the questions")
    if mode == "semantic" and embedder is None:
        fail(f"could not evaluate the questions: semantic mode needs the local model ({fallback}); run `sbuf init`")
    with failing("could not evaluate the questions"):
        known = {record.id for paths in stores for record in Repository(paths).records()}
        return evaluate_questions(stores, questions, known, k=k, mode=mode, embedder=embedder, fallback=fallback,
                                  progress=_sign_of_life(len(questions)))  # fmt: skip


def _sign_of_life(total: int) -> Callable[[int], None]:
    """A line on stderr every few seconds while questions are being asked."""
    last = time.monotonic()

    def progress(done: int) -> None:
        nonlocal last
        if time.monotonic() - last >= SIGN_OF_LIFE_S and done < total:
            click.echo(f"evaluated {done}/{total} questions…", err=True)
            last = time.monotonic()

    return progress


def _corpus_text(report: dict[str, Any]) -> str:
    out = current().out()
    names = list(report["thresholds"])
    labels = {"recall_at_5": "recall@5", "mean_reciprocal_rank": "MRR", "scope_violation_rate": "scope violations",
              "inactive_or_superseded_leakage_rate": "inactive leakage"}  # fmt: skip
    lines = [
        out.field("Corpus", f"{report['revision']} ({report['records']} records, {report['queries']} questions)"),
        out.field("Model", report["model"]["version"]),
        "",
        f"{'mode':<12}" + "".join(f"{labels[name]:>18}" for name in names),
    ]
    for mode, metrics in report["modes"].items():
        lines.append(f"{mode:<12}" + "".join(f"{metrics[name]:>18.4f}" for name in names))
    lines.append("")
    for mode, metrics in report["modes"].items():
        for miss in metrics["misses"]:
            where = f"rank {miss['rank']}" if miss["rank"] else "not found"
            lines.append(f"{out.warning('miss')} ({mode}, {miss['store']}): {one_line(miss['query'])!r} {where}")
    for failure in report["failures"]:
        lines.append(f"{out.failure('failed')}: {failure}")
    lines.append(out.field("Result", out.success("passed") if report["passed"] else out.failure("failed")))
    return "\n".join(lines)


def _questions_text(report: dict[str, Any]) -> str:
    out = current().out()
    k = report["k"]
    lines = []
    for result in report["results"]:
        rank = result["rank"]
        verdict = out.success(f"rank {rank}") if rank and rank <= k else out.failure(f"rank {rank}" if rank else "miss")
        lines.append(f"{verdict}  {one_line(result['query'])}")
        for item in result["not_in_store"]:
            lines.append(f"  {out.warning('warning')}: {item} is not an active record in this view")
        if rank != 1:
            for position, above in enumerate(result["above"], 1):
                lines.append(f"  {position}. {above['id']}  {one_line(above['title'])}  ({above['score']:.4f})")
    lines += [
        "",
        out.field("Questions", str(report["questions"])),
        out.field("Mode", report["mode"]),
        out.field(f"Recall@{k}", f"{report['recall_at_k']:.4f} ({report['found_at_k']} of {report['questions']} "
                                 f"found in the first {k})"),
        out.field("MRR", f"{report['mean_reciprocal_rank']:.4f}"),
    ]  # fmt: skip
    return "\n".join(lines)
