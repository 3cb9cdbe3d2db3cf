"""traceview's error types and the CLI exit code each one maps to.

Every error the library raises on bad input is a :class:`TraceviewError` whose message is
one line naming the file and the fault. The CLI prints ``traceview: error: <message>`` and
exits with the class's ``exit_code``; it never shows a traceback for these.

Exit codes (documented in docs/exit-codes.md):

====  =====================================================================
0     success
1     a ``traceview verify`` check failed or is unknown (reserved for the verify command)
2     usage error (bad flag, bad value)
3     no trace found under the given path
4     a trace was found but is unreadable (corrupt, truncated, not a trace)
5     the trace is readable but holds nothing to analyze (no HLO ops)
6     a resource limit was hit (decompression or parse limit; a query's memory or time limit)
7     a remote store could not be read (access denied, server unreachable or stopped, an
      object cut short or changed while read)
8     the installation is broken: a module of traceview or of a dependency cannot be imported
====  =====================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_TRACE = 3
EXIT_UNREADABLE = 4
EXIT_NO_OPS = 5
EXIT_LIMIT = 6
EXIT_REMOTE = 7
EXIT_INSTALL = 8


class TraceviewError(Exception):
    """Base class: a one-line, user-facing fault. ``path`` names the file or folder."""

    exit_code = EXIT_UNREADABLE

    def __init__(self, message: str, path: str | None = None):
        self.path = None if path is None else str(path)
        self.fault = message
        text = f"{self.path}: {message}" if self.path else message
        # one line whatever the file or its contents hold (a newline in a JSON key, a file name)
        super().__init__(text.replace("\r", "\\r").replace("\n", "\\n"))

    def __reduce__(self):  # pickled (an answer from a child process) with its path and fault
        return type(self), (self.fault, self.path)


class UsageError(TraceviewError):
    """A bad argument value (bad regex, unknown run name, unknown chip...)."""

    exit_code = EXIT_USAGE


class NoTraceFound(TraceviewError):
    """No ``*.xplane.pb`` / ``*.trace.json[.gz]`` / ``perfetto_trace.json.gz`` under the path."""

    exit_code = EXIT_NO_TRACE


class TraceUnreadable(TraceviewError):
    """The file exists but cannot be decoded as an XSpace or a Chrome trace."""

    exit_code = EXIT_UNREADABLE


class NoOpsFound(TraceviewError):
    """The trace decodes but contains no HLO op events (e.g. a TensorFlow-only GPU trace)."""

    exit_code = EXIT_NO_OPS


class LimitExceeded(TraceviewError):
    """A safety limit (decompressed bytes, events, a query's memory or time) was exceeded; the
    limit is in the message."""

    exit_code = EXIT_LIMIT


class RemoteUnreadable(TraceviewError):
    """A URL's object store could not be read: access denied, the server cannot be reached or
    stopped answering, an object came back cut short or changed while it was read
    (:mod:`traceview.read.remote`)."""

    exit_code = EXIT_REMOTE
