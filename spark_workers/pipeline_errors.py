"""Why the pipeline stops: one root, `PipelineError`, and a subclass per thing that failed.

Nothing is published when one is raised, and its message says why: `pipeline` prints it
(any other exception is a defect, or Spark's own failure).
"""

from __future__ import annotations


class PipelineError(Exception):
    """The pipeline stops; nothing is published (the message says why)."""


class ReadOptionsError(PipelineError, ValueError):
    """An ingest option the pipeline refuses (the message says which and why). A ValueError
    too: the options' validators raise it."""


class ChecksError(PipelineError, ValueError):
    """A checks file the pipeline refuses."""


class SourceError(PipelineError):
    """The source cannot be read as asked: no such path, an unreadable file, column names
    refused, a CSV header unlike the schema."""


class SniffError(SourceError):
    """The sample cannot be read as CSV (no line; files whose headers differ)."""


class SchemaError(PipelineError):
    """The schema does not fit the request: no column to partition by, dates whose
    day/month order the data leaves open."""


class BadRowsError(PipelineError):
    """A bad row in failfast mode, or too many bad rows."""


class ChecksFailed(PipelineError):
    """The data failed its checks."""


class AppendError(PipelineError):
    """The append cannot be made (no manifest to take the schema from, another schema)."""


class VersionError(PipelineError):
    """The version cannot be published (it exists, or the name is not a link)."""
