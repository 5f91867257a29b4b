"""The Tinker room: Tinker's REST protocol under `/api/v1`, so the official `tinker` client and the
tinker-cookbook run against Keel by `base_url` alone (docs/tinker.md).

Over the same core objects as Keel's native routes: a session's training clients are trainers, their
requests are trainer operations run by the same workers (`api.tinker.training`, `api.tinker.futures`).
Errors take Tinker's shapes: a failed future is `{error, category}`; HTTP errors keep Keel's problem
body, whose `detail` the client shows. `api.tinker.room` lists the routers.
"""

