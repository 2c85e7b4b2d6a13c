--- The store's schema, as an ordered list of migrations (mcpclient.agent.store).
--
-- Migration N is applied once, in its own transaction, and recorded as row N
-- of `schema_version`. Never edit a migration that has shipped: append a new
-- one. The SQL is SQLite-flavoured standard SQL, written once for every
-- database: the adapter's dialect rewrites the column types where another
-- database needs it (store/dialect.lua: on PostgreSQL BIGINT, BIGSERIAL,
-- BYTEA). A host adapter may still pass a list of its own
-- (store.open_adapter(adapter, { migrations = ... })).
--
-- Tables:
--   mcp_server        operator-managed servers, reached by url or started by
--                     command (stdio); the credential is a reference
--                     (env:NAME or a resolver key), never the secret; what a
--                     change notice does to its catalogue (reimport); its
--                     proxy, TLS files, plain headers and roots
--   mcp_tool          machine-managed imported tools, with their input and
--                     output schemas as JSON text; tool_name UNIQUE
--   tool_state        per-tool enablement override (tool_name UNIQUE)
--   tool_group_state  per-group enablement override (group_name UNIQUE)
--   agent_run         runs with their execution lease and effect fence
--   agent_run_event   the run's event stream (the audit); UNIQUE(run, sequence)
--   governance_event  append-only denial log
--   mcp_oauth_grant   OAuth grants (tokens and client registrations), keyed
--                     by server identifier, protected resource and issuer;
--                     the record is JSON and a secret (the file is 0600)
--   agent_task        a run's calls that became tasks: the handle, stored
--                     when the server answered, so another process follows
--                     the task instead of calling again; UNIQUE (run, server,
--                     task_id): a task id is only its server's
--   mcp_offer         machine-managed resources, resource templates and prompts
--                     a server listed at import; UNIQUE (server, kind, ident)
return {
  {
    description = "catalogue, enablement, runs and governance",
    sql = [[
CREATE TABLE mcp_server (
  uid               INTEGER PRIMARY KEY AUTOINCREMENT,
  pid               INTEGER NOT NULL DEFAULT 0,
  identifier        TEXT    NOT NULL DEFAULT '',
  name              TEXT    NOT NULL DEFAULT '',
  description       TEXT    NOT NULL DEFAULT '',
  url               TEXT    NOT NULL DEFAULT '',
  auth_credential   TEXT    NOT NULL DEFAULT '',
  auth_placement    TEXT    NOT NULL DEFAULT 'bearer',
  auth_header_name  TEXT    NOT NULL DEFAULT '',
  data_class        TEXT    NOT NULL DEFAULT '',
  requires_approval TEXT    NOT NULL DEFAULT '1',
  enabled           INTEGER NOT NULL DEFAULT 0,
  import_status     TEXT    NOT NULL DEFAULT 'never_imported',
  import_error      TEXT    NOT NULL DEFAULT '',
  last_imported     INTEGER NOT NULL DEFAULT 0,
  tool_count        INTEGER NOT NULL DEFAULT 0,
  tstamp            INTEGER NOT NULL DEFAULT 0,
  crdate            INTEGER NOT NULL DEFAULT 0,
  deleted           INTEGER NOT NULL DEFAULT 0,
  hidden            INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX mcp_server_parent ON mcp_server (pid);
CREATE INDEX mcp_server_identifier ON mcp_server (identifier);

CREATE TABLE mcp_tool (
  uid                INTEGER PRIMARY KEY AUTOINCREMENT,
  pid                INTEGER NOT NULL DEFAULT 0,
  server             INTEGER NOT NULL DEFAULT 0,
  tool_name          TEXT    NOT NULL DEFAULT '' UNIQUE,
  remote_name        TEXT    NOT NULL DEFAULT '',
  description        TEXT    NOT NULL DEFAULT '',
  input_schema       TEXT    NOT NULL DEFAULT '',
  remote_annotations TEXT    NOT NULL DEFAULT '',
  orphaned           INTEGER NOT NULL DEFAULT 0,
  tstamp             INTEGER NOT NULL DEFAULT 0,
  crdate             INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX mcp_tool_server ON mcp_tool (server);

CREATE TABLE tool_state (
  uid       INTEGER PRIMARY KEY AUTOINCREMENT,
  tool_name TEXT    NOT NULL DEFAULT '' UNIQUE,
  enabled   INTEGER NOT NULL DEFAULT 0,
  tstamp    INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE tool_group_state (
  uid        INTEGER PRIMARY KEY AUTOINCREMENT,
  group_name TEXT    NOT NULL DEFAULT '' UNIQUE,
  enabled    INTEGER NOT NULL DEFAULT 0,
  tstamp     INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE agent_run (
  uid              INTEGER PRIMARY KEY AUTOINCREMENT,
  uuid             TEXT    NOT NULL DEFAULT '',
  status           TEXT    NOT NULL DEFAULT '',
  claimed_by       TEXT    NOT NULL DEFAULT '',
  lease_expires    INTEGER NOT NULL DEFAULT 0,
  pending_effect   TEXT    NOT NULL DEFAULT '',
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  user_name        TEXT    NOT NULL DEFAULT '',
  configuration    TEXT    NOT NULL DEFAULT '',
  crdate           INTEGER NOT NULL DEFAULT 0,
  tstamp           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX agent_run_uuid ON agent_run (uuid);
CREATE INDEX agent_run_lease ON agent_run (status, lease_expires);

CREATE TABLE agent_run_event (
  uid         INTEGER PRIMARY KEY AUTOINCREMENT,
  run         INTEGER NOT NULL DEFAULT 0,
  sequence    INTEGER NOT NULL DEFAULT 0,
  kind        TEXT    NOT NULL DEFAULT '',
  round       INTEGER NOT NULL DEFAULT 0,
  duration_ms REAL    NOT NULL DEFAULT 0,
  payload     TEXT    NOT NULL DEFAULT '',
  crdate      INTEGER NOT NULL DEFAULT 0,
  UNIQUE (run, sequence)
);

CREATE TABLE governance_event (
  uid                      INTEGER PRIMARY KEY AUTOINCREMENT,
  pid                      INTEGER NOT NULL DEFAULT 0,
  crdate                   INTEGER NOT NULL DEFAULT 0,
  correlation_id           TEXT    NOT NULL DEFAULT '',
  decision                 TEXT    NOT NULL DEFAULT '',
  reason                   TEXT    NOT NULL DEFAULT '',
  provider                 TEXT    NOT NULL DEFAULT '',
  model                    TEXT    NOT NULL DEFAULT '',
  configuration_identifier TEXT    NOT NULL DEFAULT '',
  be_user                  INTEGER NOT NULL DEFAULT 0,
  tool_name                TEXT    NOT NULL DEFAULT '',
  agentrun_uid             INTEGER NOT NULL DEFAULT 0,
  guardrail                TEXT    NOT NULL DEFAULT '',
  detail                   TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX governance_event_crdate ON governance_event (crdate);
CREATE INDEX governance_event_decision ON governance_event (decision, crdate);
CREATE INDEX governance_event_reason ON governance_event (decision, reason, crdate);
CREATE INDEX governance_event_tool ON governance_event (tool_name, crdate);
CREATE INDEX governance_event_correlation ON governance_event (correlation_id);
CREATE INDEX governance_event_run ON governance_event (agentrun_uid, crdate);
]],
  },
  {
    -- Liveness came in its own migration: a store from before it has servers
    -- but nowhere to stamp a contact, and a contact must not fail a call there.
    description = "server liveness: last_contact, last_latency_ms",
    sql = [[
ALTER TABLE mcp_server ADD COLUMN last_contact INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mcp_server ADD COLUMN last_latency_ms INTEGER NOT NULL DEFAULT 0;
]],
  },
  {
    -- The grant table used to be created outside the migrations, keyed by
    -- the server's identifier first, and a failed read of it was taken as
    -- "no grant". It now belongs to the schema (both databases' dialects).
    -- Grants kept before this migration are dropped, knowingly: they were
    -- found by identifier alone, so one could follow an identifier to a
    -- server it was never issued for; the operator logs in again.
    description = "OAuth grants keyed by resource and issuer",
    sql = [[
DROP TABLE IF EXISTS mcp_oauth_grant;
CREATE TABLE mcp_oauth_grant (
  uid      INTEGER PRIMARY KEY AUTOINCREMENT,
  server   TEXT    NOT NULL DEFAULT '',
  resource TEXT    NOT NULL DEFAULT '',
  issuer   TEXT    NOT NULL DEFAULT '',
  record   TEXT    NOT NULL DEFAULT '',
  tstamp   INTEGER NOT NULL DEFAULT 0,
  UNIQUE (server, resource, issuer)
);
CREATE INDEX mcp_oauth_grant_server ON mcp_oauth_grant (server, tstamp);
]],
  },
  {
    -- A task-backed call of a run: its handle (JSON text: the task id, the
    -- server, and for a 2025 task the session it belongs to), the call it
    -- is (the audit sequence its step takes, the round, the tool, its
    -- arguments as JSON text and their digest), who started it and who
    -- finished it. `status` is the last one seen; `closed` once its step is
    -- in the audit.
    description = "agent_task: the handles of a run's task-backed calls",
    sql = [[
CREATE TABLE agent_task (
  uid              INTEGER PRIMARY KEY AUTOINCREMENT,
  run              INTEGER NOT NULL DEFAULT 0,
  sequence         INTEGER NOT NULL DEFAULT 0,
  server           TEXT    NOT NULL DEFAULT '',
  task_id          TEXT    NOT NULL DEFAULT '',
  tool             TEXT    NOT NULL DEFAULT '',
  arguments_sha256 TEXT    NOT NULL DEFAULT '',
  arguments        TEXT    NOT NULL DEFAULT '',
  round            INTEGER NOT NULL DEFAULT 0,
  handle           TEXT    NOT NULL DEFAULT '',
  status           TEXT    NOT NULL DEFAULT '',
  started_by       TEXT    NOT NULL DEFAULT '',
  finished_by      TEXT    NOT NULL DEFAULT '',
  closed           INTEGER NOT NULL DEFAULT 0,
  crdate           INTEGER NOT NULL DEFAULT 0,
  tstamp           INTEGER NOT NULL DEFAULT 0,
  UNIQUE (server, task_id)
);
CREATE INDEX agent_task_run ON agent_task (run, closed);
CREATE INDEX agent_task_open ON agent_task (closed, server);
]],
  },
  {
    -- What a server offers beside its tools, kept as the tools are (rows
    -- stay once orphaned: a run's audit may name them), and the mark a
    -- notifications/tools/list_changed leaves until the next import.
    description = "server offers: resources, templates, prompts; catalogue_stale",
    sql = [[
ALTER TABLE mcp_server ADD COLUMN catalogue_stale INTEGER NOT NULL DEFAULT 0;
CREATE TABLE mcp_offer (
  uid         INTEGER PRIMARY KEY AUTOINCREMENT,
  server      INTEGER NOT NULL DEFAULT 0,
  kind        TEXT    NOT NULL DEFAULT '',
  ident       TEXT    NOT NULL DEFAULT '',
  name        TEXT    NOT NULL DEFAULT '',
  title       TEXT    NOT NULL DEFAULT '',
  description TEXT    NOT NULL DEFAULT '',
  mime_type   TEXT    NOT NULL DEFAULT '',
  detail      TEXT    NOT NULL DEFAULT '',
  orphaned    INTEGER NOT NULL DEFAULT 0,
  tstamp      INTEGER NOT NULL DEFAULT 0,
  crdate      INTEGER NOT NULL DEFAULT 0,
  UNIQUE (server, kind, ident)
);
CREATE INDEX mcp_offer_server ON mcp_offer (server, kind, orphaned);
]],
  },
  {
    -- Servers started over stdio: the argv (a JSON array of strings), the
    -- environment the operator names (a JSON object of NAME -> value or
    -- "env:VAR"), the working directory. A row has a url or a command.
    description = "stdio servers: command, env, cwd",
    sql = [[
ALTER TABLE mcp_server ADD COLUMN command TEXT NOT NULL DEFAULT '';
ALTER TABLE mcp_server ADD COLUMN env TEXT NOT NULL DEFAULT '';
ALTER TABLE mcp_server ADD COLUMN cwd TEXT NOT NULL DEFAULT '';
]],
  },
  {
    -- The operator's choice of what a change notice does: "manual" (the
    -- catalogue is marked stale until `mcpclient import`) or "auto" (the
    -- host imports it again at its next safe point). reimport_pending says
    -- where a notice left the catalogue: 0 nothing to do, 1 a re-import is
    -- due (taken by one process with a compare-and-set), 2 a notice came on
    -- an import's own connection (the catalogue stays stale, nothing is due).
    description = "mcp_server: reimport (auto | manual) and reimport_pending",
    sql = [[
ALTER TABLE mcp_server ADD COLUMN reimport TEXT NOT NULL DEFAULT 'manual';
ALTER TABLE mcp_server ADD COLUMN reimport_pending INTEGER NOT NULL DEFAULT 0;
]],
  },
  {
    -- A run waiting for approval keeps what it waits on, so another process
    -- can take it over: pending_steps (JSON: the round and the suspended
    -- calls, reads and prompt gets with their arguments), written with the
    -- status in one guarded update, and approval, the decision a person
    -- recorded from any process ('' none yet, 'approved', 'denied').
    description = "agent_run: pending_steps and approval of a waiting run",
    sql = [[
ALTER TABLE agent_run ADD COLUMN pending_steps TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_run ADD COLUMN approval TEXT NOT NULL DEFAULT '';
]],
  },
  {
    -- A task id is its server's, unique only per server and, for a
    -- 2025-11-25 task, per session: a server may give an id again to a task
    -- of another session (or after a restart), so a stored task is one
    -- run's task of one server, UNIQUE (run, server, task_id) instead of
    -- (server, task_id), which refused to store the second task's handle.
    -- Neither database drops a table's UNIQUE in place everywhere, so the
    -- table is rebuilt with every row and uid kept; the uid counter goes on
    -- after the highest uid (the resequence line: PostgreSQL's dialect makes
    -- it a setval, SQLite's AUTOINCREMENT follows the copied uids itself).
    -- agent_task_id serves the lookups by task id.
    description = "agent_task: a task is one run's task of one server, UNIQUE (run, server, task_id)",
    sql = [[
CREATE TABLE agent_task_keyed (
  uid              INTEGER PRIMARY KEY AUTOINCREMENT,
  run              INTEGER NOT NULL DEFAULT 0,
  sequence         INTEGER NOT NULL DEFAULT 0,
  server           TEXT    NOT NULL DEFAULT '',
  task_id          TEXT    NOT NULL DEFAULT '',
  tool             TEXT    NOT NULL DEFAULT '',
  arguments_sha256 TEXT    NOT NULL DEFAULT '',
  arguments        TEXT    NOT NULL DEFAULT '',
  round            INTEGER NOT NULL DEFAULT 0,
  handle           TEXT    NOT NULL DEFAULT '',
  status           TEXT    NOT NULL DEFAULT '',
  started_by       TEXT    NOT NULL DEFAULT '',
  finished_by      TEXT    NOT NULL DEFAULT '',
  closed           INTEGER NOT NULL DEFAULT 0,
  crdate           INTEGER NOT NULL DEFAULT 0,
  tstamp           INTEGER NOT NULL DEFAULT 0,
  UNIQUE (run, server, task_id)
);
INSERT INTO agent_task_keyed (uid, run, sequence, server, task_id, tool, arguments_sha256, arguments, round, handle,
  status, started_by, finished_by, closed, crdate, tstamp)
  SELECT uid, run, sequence, server, task_id, tool, arguments_sha256, arguments, round, handle, status, started_by,
    finished_by, closed, crdate, tstamp FROM agent_task;
DROP TABLE agent_task;
ALTER TABLE agent_task_keyed RENAME TO agent_task;
-- resequence agent_task.uid
CREATE INDEX agent_task_run ON agent_task (run, closed);
CREATE INDEX agent_task_open ON agent_task (closed, server);
CREATE INDEX agent_task_id ON agent_task (task_id, server);
]],
  },
  {
    -- Columns named for what they hold: the run's write fence was
    -- pending_effect, every row's creation and change times were crdate and
    -- tstamp, and a governance event's acting user (the user's uid, 0 for
    -- nobody) was be_user. mcp_server.hidden was never read nor written by
    -- this library: it goes. Every row keeps its values under the new names.
    -- Both databases rename and drop a column in place (SQLite from 3.35),
    -- and an index follows its column; the one index named for an old column
    -- is made again under its new name.
    description = "columns named for what they hold: fence, created_at, updated_at, user_uid; hidden dropped",
    sql = [[
ALTER TABLE agent_run RENAME COLUMN pending_effect TO fence;
ALTER TABLE agent_run RENAME COLUMN crdate TO created_at;
ALTER TABLE agent_run RENAME COLUMN tstamp TO updated_at;
ALTER TABLE agent_run_event RENAME COLUMN crdate TO created_at;
ALTER TABLE agent_task RENAME COLUMN crdate TO created_at;
ALTER TABLE agent_task RENAME COLUMN tstamp TO updated_at;
ALTER TABLE mcp_server RENAME COLUMN crdate TO created_at;
ALTER TABLE mcp_server RENAME COLUMN tstamp TO updated_at;
ALTER TABLE mcp_server DROP COLUMN hidden;
ALTER TABLE mcp_tool RENAME COLUMN crdate TO created_at;
ALTER TABLE mcp_tool RENAME COLUMN tstamp TO updated_at;
ALTER TABLE mcp_offer RENAME COLUMN crdate TO created_at;
ALTER TABLE mcp_offer RENAME COLUMN tstamp TO updated_at;
ALTER TABLE mcp_oauth_grant RENAME COLUMN tstamp TO updated_at;
ALTER TABLE tool_state RENAME COLUMN tstamp TO updated_at;
ALTER TABLE tool_group_state RENAME COLUMN tstamp TO updated_at;
ALTER TABLE governance_event RENAME COLUMN crdate TO created_at;
ALTER TABLE governance_event RENAME COLUMN be_user TO user_uid;
DROP INDEX governance_event_crdate;
CREATE INDEX governance_event_created ON governance_event (created_at);
]],
  },
  {
    -- How a server is reached and what it is told, beside its URL or
    -- command: proxy ('' the environment's, 'none' no proxy, else the proxy's
    -- URL); ca_file and client_cert (file paths); client_key (a file path or
    -- a credential reference such as env:NAME: the key itself is never
    -- stored); headers (a JSON object of non-secret request headers, NAME ->
    -- value); roots (a JSON array of { uri, name }: the file:// roots the
    -- server is told about). '' everywhere is what a row meant before.
    description = "mcp_server: proxy, ca_file, client_cert, client_key, headers, roots",
    sql = [[
ALTER TABLE mcp_server ADD COLUMN proxy TEXT NOT NULL DEFAULT '';
ALTER TABLE mcp_server ADD COLUMN ca_file TEXT NOT NULL DEFAULT '';
ALTER TABLE mcp_server ADD COLUMN client_cert TEXT NOT NULL DEFAULT '';
ALTER TABLE mcp_server ADD COLUMN client_key TEXT NOT NULL DEFAULT '';
ALTER TABLE mcp_server ADD COLUMN headers TEXT NOT NULL DEFAULT '';
ALTER TABLE mcp_server ADD COLUMN roots TEXT NOT NULL DEFAULT '';
]],
  },
  {
    -- An imported tool's outputSchema as its listing gave it (JSON text, ''
    -- when the tool declares none): a run's calls go through connections
    -- that never list, so the import's copy is what a result is checked
    -- against. Rows from before it read as declaring none until the server
    -- is imported again.
    description = "mcp_tool: output_schema",
    sql = [[
ALTER TABLE mcp_tool ADD COLUMN output_schema TEXT NOT NULL DEFAULT '';
]],
  },
}
