--- The operator command's words: the overview, one help page per command,
--- and "did you mean" for a mistyped command or option.
local suggest = require "mcpclient.suggest"

local help = {}

help.OVERVIEW = [==[
usage: mcpclient [--db PATH] [--json] [--budget SECONDS] <command> [arguments]

Servers are named by identifier or by numeric id, in every command.

  servers [<server>]           every server (or one): configuration, liveness, tools
  add --identifier ID --name NAME --url URL [server flags]
  add --identifier ID --name NAME [server flags] -- PROGRAM [ARGS...]
                               configure a server, by URL or a local command over stdio
                               (says what it still needs)
  edit <server> [server flags] change a server
  remove <server>              remove a server (its tool records stay for the audit)
  test <server> | --all        is the server there? one handshake, records the contact
  check <server> | <URL> | -- PROGRAM [ARGS...]
                               the live conformance run: every check that applies
  import <server> | --all      import the tool catalogue (tools start switched off)
  tools [<server>]             the imported tools and whether each is on
  resources <server>           the server's resources and resource templates, asked live
  read <server> <uri>          read one resource, as a model would read it
  prompts <server>             the server's prompts and their arguments, asked live
  login <server>               OAuth: authorize in a browser, keep the grant for every later connection
  logout <server>              forget the server's stored OAuth grant
  enable <tool|group>          switch a tool on, or a server's group and all its tools
  disable <tool|group>         switch a tool or a whole group off
  runs [--open|--waiting]      the agent runs: state, owner, lease, the write fence, what to do next
  approve <run> [<step id>]    a person approves a waiting run's step (or every step not decided yet)
  deny <run> [<step id>] [--reason TEXT]
                               a person denies one (or every step not decided yet)
  tasks [<server>]             the open task-backed calls of the runs: status, age, run
  tasks cancel <id>            ask a task's server to cancel it (--server, --run: which one)
  help [<command>]             this text, or one command's

global options:
  --db PATH           the database: a file path, or a shared PostgreSQL store named by a
                      postgresql:// URL or a libpq "host=... dbname=..." string (keep the
                      password in PGPASSWORD or ~/.pgpass: a command line is not secret)
                      (default $MCPCLIENT_DB, else $XDG_DATA_HOME/mcpclient/mcpclient.db,
                      XDG_DATA_HOME defaulting to ~/.local/share). Only `add` creates a file.
  --json              print JSON (schema: docs/CLI.md)
  --budget SECONDS    the time one operation on a server may take (default 20)
  --version           print the version
  -h, --help          help; after a command, that command's help

Exit status: 0 done, 1 failed, 2 usage. Whoever can run this command on the database acts as its
administrator: access to the command and the database file is the admin check.]==]

local SERVER_FLAGS = [==[
server flags:
  --identifier ID        1-32 of a-z 0-9 _ - (names the tools: mcp_<ID>_<remote name>)
  --name NAME            --description TEXT
  --url URL              http or https (http only for loopback in practice)
  -- PROGRAM [ARGS...]     instead of --url: a local server started over stdio (argv, no shell)
  --env NAME=VALUE       for a command: a variable it gets (repeatable; NAME=env:VAR reads the
                         host's VAR when it starts; "servers" never shows a value)
  --cwd DIR              for a command: its working directory
  --credential REF       a reference such as env:NAME, never the secret itself ("" withdraws it, edit only)
  --placement bearer|header                --header-name NAME (with header)
  --data-class CLASS     publicContent editorContent sourceCode internalConfiguration
                         systemDiagnostics secretAdjacent ("" withdraws it)
  --approval yes|no      whether a human approves every call (default yes)
  --reimport auto|manual what a change notice from the server does: manual (the default) marks
                         its catalogue stale until `import`; auto imports it again on its own
                         at the host's next safe point (before a run's next turn)
  --proxy URL|none       for a URL: its proxy (http://, https:// or socks5h://HOST:PORT; no
                         user or password); none ignores HTTPS_PROXY and the rest; "" (edit)
                         goes back to the environment's
  --ca-file FILE         for a URL: a private CA trusted for this server only
  --client-cert FILE     --client-key FILE|env:NAME   the client certificate and its key (the
                         key's path, or a reference to it; the key itself is never stored)
  --header NAME=VALUE    for a URL: a plain header on every request (repeatable; no secrets,
                         no Authorization, Cookie, Host, Accept, Content-*, Mcp-*)
  --root URI[=NAME]      a file:// root the server is told about (repeatable)
                         (edit: --header and --root replace the whole list; "" clears it)
  --enabled | --disabled (add: default disabled)]==]

help.COMMANDS = {
  servers = [==[
usage: mcpclient servers [<server>] [--json]

Every server (or the one named), enabled or not, with its configuration, last contact (UTC) and latency,
last import, and imported tools. Lines marked "!" need the operator's attention.
Reads only: a missing database is reported, never created.]==],
  add = [==[
usage: mcpclient add --identifier ID --name NAME --url URL [server flags]
       mcpclient add --identifier ID --name NAME [server flags] -- PROGRAM [ARGS...]
       mcpclient add --from FILE [NAME...] [--format claude|cursor|windsurf|vscode|server.json]
                     [--input ID=env:VAR|ID=TEXT]... [--replace]

Configures a server: one reached by URL, or a local program started over stdio with
only HOME, LOGNAME, PATH, SHELL, TERM, USER, LANG, LC_* and its --env variables.
A duplicate identifier is refused. When the server cannot yet
supply tools (no data class, disabled), the command says what is missing and the
`mcpclient edit` that fixes it; then `mcpclient import <server>`.

--from FILE adds the servers a configuration file describes (Claude Desktop, Cursor, Windsurf
and Claude Code's mcpServers, VS Code's servers, a registry server.json; the shape decides,
--format says), or the NAMEs given, each disabled, printing the edit commands each still needs.
No secret is stored: ${env:VAR} stays a reference, a value that looks like a secret becomes a
reference to an environment variable it names. ${input:ID} is asked on the terminal, or given
with --input ID=env:VAR (a password input only so). A server whose identifier exists is left
as it is unless --replace.

]==] .. SERVER_FLAGS,
  edit = [==[
usage: mcpclient edit <server> [server flags] [-- PROGRAM [ARGS...]]

Changes the given fields of a server (named by identifier or id). A new --url forgets the
server's stored OAuth authorization (it was issued for the old one) and says so; on a
stdio server it makes it an HTTP one (its command, env and cwd go), and a command
after -- does the reverse. --env replaces the whole environment of a stdio server.

]==] .. SERVER_FLAGS,
  remove = [==[
usage: mcpclient remove <server>

Removes a server. Its tool records stay, so past runs can still be audited; its stored
OAuth authorization is forgotten with it.]==],
  test = [==[
usage: mcpclient test <server> [--json]
       mcpclient test --all [--json]

One handshake on a fresh connection: reachable or not, the latency, the protocol
revision and what the server calls itself. Records the contact in the database.
--all tests every enabled server, up to four at once, one line (or JSON object) each.]==],
  check = [==[
usage: mcpclient check <server> | <URL> [--call TOOL [--arguments JSON]] [--json]
       mcpclient check [--env NAME=VALUE|NAME=env:VAR]... [--cwd DIR] [--call ...] -- PROGRAM [ARGS...]

The live conformance run: every check of the per-connection suite that a real server
can answer (handshake, session, capabilities, paged discovery, schema normalisation of
the real catalogue, a call, error shapes, the budget, cancellation, the health stamp),
through the whole client. One line per check: passed, failed or not applicable, and why.
Exit 0 when every applicable check passed, 1 otherwise.

A tool is called only when the server declares it read-only and it needs no argument,
or when you name one with --call (and its arguments as a JSON object with --arguments):
then the call check fails when the tool answers with an error, and shows its text.
An http(s) URL instead of a server checks it without adding it (no database needed,
no credential sent), and so does the command of a local stdio server after --: it is
started, checked and stopped, with the environment --env names (as for add) and --cwd.
Nothing is stored.]==],
  import = [==[
usage: mcpclient import <server> | --all [--json]

Imports the tool catalogue of one server (enabled or not), or of every enabled server.
Imported tools start switched off: switch one on with `mcpclient enable <tool>`, or
every tool of a server with `mcpclient enable mcp_<identifier>`.]==],
  tools = [==[
usage: mcpclient tools [<server>] [--json]

The imported tools, of one server or of all, and whether each is switched on.]==],
  resources = [==[
usage: mcpclient resources <server> [--json]

Asks the server (enabled or not) for its resources and resource templates, every page,
and prints them. Everything the server wrote is shown under the text rule.]==],
  read = [==[
usage: mcpclient read <server> <uri> [--json]

Reads one resource and prints what a model would read: the text contents, with a note
naming what is not text (--json: each content's uri, type, text or blob size).]==],
  prompts = [==[
usage: mcpclient prompts <server> [--json]

Asks the server (enabled or not) for its prompts and prints each with its arguments
(* marks a required one).]==],
  enable = [==[
usage: mcpclient enable <tool|group> [--tool | --group]

A tool name (mcp_<identifier>_<remote>) switches that tool on. A group name
(mcp_<identifier>) switches the server's group on and every tool of it on.
--tool / --group say which is meant when a name is both.]==],
  disable = [==[
usage: mcpclient disable <tool|group> [--tool | --group]

A tool name switches that tool off. A group name switches the whole group off: no
tool of it is offered, whatever its own switch; `enable` on the group turns it back on.]==],
  login = [==[
usage: mcpclient login <server> [--wait SECONDS] [--port PORT] [--client-id ID]
                                [--client-secret env:NAME] [--scope SCOPES] [--json]

For a server behind OAuth (and without a static --credential): prints the authorization
URL to open in a browser, waits (default 300 s) for the redirect on a one-shot listener
at http://127.0.0.1:<port>/callback, and keeps the grant (tokens, refresh token) in the
database, readable by its owner only. Every later connection to the server, the command's
and an agent loop's on the same database, uses and refreshes it, as long as the server's
URL and its authorization server stay those it was issued for. `servers` shows
"authorized (scope, expiry)" or "needs login"; tokens are never printed.

  --port PORT               listen on this port instead of one the system picks; over SSH,
                            forward it from the machine with the browser:
                            ssh -L PORT:127.0.0.1:PORT <this host>
  --client-id ID            a client registered in advance at the authorization server
                            (default: the client registers itself, where it can)
  --client-secret env:NAME  that client's secret, as the environment variable holding it
                            (a reference; the secret itself is refused)
  --scope SCOPES            space-separated scopes to ask for besides the server's own]==],
  logout = [==[
usage: mcpclient logout <server> [--json]

Forgets the server's stored OAuth grant.]==],
  runs = [==[
usage: mcpclient runs [--open | --waiting] [--json]
       mcpclient runs approve <run id> [<step id>] [--json]
       mcpclient runs deny <run id> [<step id>] [--reason TEXT] [--json]

The agent runs on this database, newest first: state, lease owner and expiry, and the
write fence (the calls that may have been sent: tool, arguments digest, the audit sequence
each step was to take, and whether the audit holds it), with the next step for each. A run
whose worker vanished during a write (lease expired, fence set) is marked failed first.
--open shows only runs still running or waiting, or with a fence set; --waiting only the runs
waiting for a person. A waiting run shows each step it waits on: its id, whether it needs
approval or only waits behind another step, and the decision on it. `runs approve` / `runs
deny` (also spelled `approve` / `deny`) record a person's decision on one step, named by its
id, or on every step not decided yet (the first decision on a step holds); the process that
holds the run, or one that takes it over, applies it when it resumes. An unknown run or step
id is refused and changes nothing.]==],
  approve = [==[
usage: mcpclient approve <run id> [<step id>] [--json]

The same as `mcpclient runs approve`: see `mcpclient help runs`.]==],
  deny = [==[
usage: mcpclient deny <run id> [<step id>] [--reason TEXT] [--json]

The same as `mcpclient runs deny`: see `mcpclient help runs`. The reason reaches the model
in the denied step's answer.]==],
  tasks = [==[
usage: mcpclient tasks [<server>] [--json]
       mcpclient tasks cancel <task id> [--server NAME] [--run ID] [--json]

The calls of agent runs that became tasks on their server and have no step in the audit yet,
oldest first: task id, server, last status seen, age, the run and the step it is, who started
it. A run whose worker died is taken over by another process (run.take_over), which follows the
same task instead of calling again. `tasks cancel` asks the task's server to cancel it
(cooperative: it may still end otherwise); the run that follows it records how it ended. A task
id is its server's: an open task is taken over ended ones of the same id, and an id several
stored tasks share is refused with each server and run; --server NAME (and --run ID) picks one.]==],
  help = [==[
usage: mcpclient help [<command>]]==],
}

--- The closest of `candidates` to `word`, when it is close enough to be a typo.
help.suggest = suggest.closest

return help
