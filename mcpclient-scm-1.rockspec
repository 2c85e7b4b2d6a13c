rockspec_format = "3.0"
package = "mcpclient"
version = "scm-1"
source = { url = "git+file:///dev/null" }
description = {
  summary = "Model Context Protocol client for Lua 5.4 agents, with a C core",
  detailed = [[
    Connects to remote MCP servers over Streamable HTTP, imports their tool
    catalogues, and calls their tools through a policy gate with an audit trail.
  ]],
  license = "MIT",
}
dependencies = { "lua >= 5.4, < 5.5" }
external_dependencies = {
  CURL = { library = "curl" },
  JANSSON = { library = "jansson" },
  SQLITE = { library = "sqlite3" },
  PQ = { header = "postgresql/libpq-fe.h", library = "pq" }, -- Debian puts libpq-fe.h under postgresql/
  CRYPTO = { library = "crypto" },
  IDN2 = { library = "idn2" },
}
build = {
  type = "builtin",
  modules = {
    -- The protocol client's C half: the engine, JSON, event streams, schemas, the text rule.
    ["mcpclient.core"] = {
      sources = {
        "csrc/core/core.c", "csrc/core/json.c", "csrc/core/sse.c", "csrc/core/engine.c", "csrc/core/pipe.c",
        "csrc/core/clock.c", "csrc/core/text.c", "csrc/shared/utf8.c", "csrc/core/schema.c",
        "csrc/core/decode.c", "csrc/core/measure.c", "csrc/shared/body.c",
        "csrc/core/lazy.c", "csrc/core/refs.c", "csrc/core/process.c", "csrc/core/validate.c",
        "csrc/core/json_reference.c", "csrc/core/json_text.c", "csrc/core/listing.c", "csrc/core/rpc.c",
      },
      libraries = { "jansson" },
      incdirs = { "csrc/include", "$(JANSSON_INCDIR)" },
      libdirs = { "$(JANSSON_LIBDIR)" },
      defines = { "_POSIX_C_SOURCE=200809L" },
    },
    -- What needs libcurl, libcrypto or libidn2 (the HTTP legs, host names, OAuth's crypto),
    -- apart so a program that only speaks stdio never maps them (the core loads this on the
    -- first HTTP connection). body.c and utf8.c are in both: neither module calls the other.
    ["mcpclient.net"] = {
      sources = {
        "csrc/net/net.c", "csrc/net/http_leg.c", "csrc/net/http_buffer.c", "csrc/net/http_headers.c",
        "csrc/net/http_pool.c", "csrc/net/http_multi.c", "csrc/net/address.c", "csrc/net/crypto.c",
        "csrc/net/loopback.c",
        "csrc/shared/body.c", "csrc/shared/utf8.c",
      },
      libraries = { "curl", "crypto", "idn2" },
      incdirs = { "csrc/include", "$(CURL_INCDIR)", "$(CRYPTO_INCDIR)", "$(IDN2_INCDIR)" },
      libdirs = { "$(CURL_LIBDIR)", "$(CRYPTO_LIBDIR)", "$(IDN2_LIBDIR)" },
      defines = { "_POSIX_C_SOURCE=200809L" },
    },
    -- The store's database drivers, apart so a program that only speaks MCP never maps
    -- libsqlite3 and libpq (the agent host's store requires this on its first open).
    ["mcpclient.db"] = {
      sources = { "csrc/db/db.c", "csrc/db/sqlite.c", "csrc/db/pg.c" },
      libraries = { "sqlite3", "pq" },
      incdirs = { "csrc/include", "$(SQLITE_INCDIR)", "$(PQ_INCDIR)/postgresql" },
      libdirs = { "$(SQLITE_LIBDIR)", "$(PQ_LIBDIR)" },
      defines = { "_POSIX_C_SOURCE=200809L" },
    },
    ["mcpclient.agent.catalogue"] = "lua/mcpclient/agent/catalogue.lua",
    ["mcpclient.agent.check"] = "lua/mcpclient/agent/check.lua",
    ["mcpclient.agent.cli"] = "lua/mcpclient/agent/cli.lua",
    ["mcpclient.agent.cli.from_file"] = "lua/mcpclient/agent/cli/from_file.lua",
    ["mcpclient.agent.cli.help"] = "lua/mcpclient/agent/cli/help.lua",
    ["mcpclient.agent.cli.render"] = "lua/mcpclient/agent/cli/render.lua",
    ["mcpclient.agent.grants"] = "lua/mcpclient/agent/grants.lua",
    ["mcpclient.agent.login"] = "lua/mcpclient/agent/login.lua",
    ["mcpclient.agent.names"] = "lua/mcpclient/agent/names.lua",
    ["mcpclient.agent.operator"] = "lua/mcpclient/agent/operator.lua",
    ["mcpclient.agent.options"] = "lua/mcpclient/agent/options.lua",
    ["mcpclient.agent.policy"] = "lua/mcpclient/agent/policy.lua",
    ["mcpclient.agent.run"] = "lua/mcpclient/agent/run.lua",
    ["mcpclient.agent.run.approval"] = "lua/mcpclient/agent/run/approval.lua",
    ["mcpclient.agent.run.lease"] = "lua/mcpclient/agent/run/lease.lua",
    ["mcpclient.agent.run.reads"] = "lua/mcpclient/agent/run/reads.lua",
    ["mcpclient.agent.run.sampling"] = "lua/mcpclient/agent/run/sampling.lua",
    ["mcpclient.agent.run.safe_point"] = "lua/mcpclient/agent/run/safe_point.lua",
    ["mcpclient.agent.run.setup"] = "lua/mcpclient/agent/run/setup.lua",
    ["mcpclient.agent.run.take_over"] = "lua/mcpclient/agent/run/take_over.lua",
    ["mcpclient.agent.run.trail"] = "lua/mcpclient/agent/run/trail.lua",
    ["mcpclient.agent.run.turn"] = "lua/mcpclient/agent/run/turn.lua",
    ["mcpclient.agent.server_options"] = "lua/mcpclient/agent/server_options.lua",
    ["mcpclient.agent.store"] = "lua/mcpclient/agent/store.lua",
    ["mcpclient.agent.store.audit"] = "lua/mcpclient/agent/store/audit.lua",
    ["mcpclient.agent.store.core"] = "lua/mcpclient/agent/store/core.lua",
    ["mcpclient.agent.store.dialect"] = "lua/mcpclient/agent/store/dialect.lua",
    ["mcpclient.agent.store.grants"] = "lua/mcpclient/agent/store/grants.lua",
    ["mcpclient.agent.store.liveness"] = "lua/mcpclient/agent/store/liveness.lua",
    ["mcpclient.agent.store.migrations"] = "lua/mcpclient/agent/store/migrations.lua",
    ["mcpclient.agent.store.postgres"] = "lua/mcpclient/agent/store/postgres.lua",
    ["mcpclient.agent.store.runs"] = "lua/mcpclient/agent/store/runs.lua",
    ["mcpclient.agent.store.servers"] = "lua/mcpclient/agent/store/servers.lua",
    ["mcpclient.agent.store.sqlite"] = "lua/mcpclient/agent/store/sqlite.lua",
    ["mcpclient.agent.store.tools"] = "lua/mcpclient/agent/store/tools.lua",
    ["mcpclient.agent.tool"] = "lua/mcpclient/agent/tool.lua",
    ["mcpclient.answers"] = "lua/mcpclient/answers.lua",
    ["mcpclient.channel.event_stream"] = "lua/mcpclient/channel/event_stream.lua",
    ["mcpclient.channel.http"] = "lua/mcpclient/channel/http.lua",
    ["mcpclient.channel.stdio"] = "lua/mcpclient/channel/stdio.lua",
    ["mcpclient.command"] = "lua/mcpclient/command.lua",
    ["mcpclient.config"] = "lua/mcpclient/config.lua",
    ["mcpclient.connection"] = "lua/mcpclient/connection.lua",
    ["mcpclient.credentials"] = "lua/mcpclient/credentials.lua",
    ["mcpclient.deadline"] = "lua/mcpclient/deadline.lua",
    ["mcpclient.engine"] = "lua/mcpclient/engine.lua",
    ["mcpclient.era.2025_11_25"] = "lua/mcpclient/era/2025_11_25.lua",
    ["mcpclient.era.2026_07_28"] = "lua/mcpclient/era/2026_07_28.lua",
    ["mcpclient.era"] = "lua/mcpclient/era/init.lua",
    ["mcpclient.errors"] = "lua/mcpclient/errors.lua",
    ["mcpclient.health"] = "lua/mcpclient/health.lua",
    ["mcpclient.hostgate"] = "lua/mcpclient/hostgate.lua",
    ["mcpclient.proxy"] = "lua/mcpclient/proxy.lua",
    ["mcpclient"] = "lua/mcpclient/init.lua",
    ["mcpclient.json"] = "lua/mcpclient/json.lua",
    ["mcpclient.log"] = "lua/mcpclient/log.lua",
    ["mcpclient.offers"] = "lua/mcpclient/offers.lua",
    ["mcpclient.oauth.challenge"] = "lua/mcpclient/oauth/challenge.lua",
    ["mcpclient.oauth.discovery"] = "lua/mcpclient/oauth/discovery.lua",
    ["mcpclient.oauth.dpop"] = "lua/mcpclient/oauth/dpop.lua",
    ["mcpclient.oauth.fetch"] = "lua/mcpclient/oauth/fetch.lua",
    ["mcpclient.oauth.grants"] = "lua/mcpclient/oauth/grants.lua",
    ["mcpclient.oauth"] = "lua/mcpclient/oauth/init.lua",
    ["mcpclient.oauth.jwt"] = "lua/mcpclient/oauth/jwt.lua",
    ["mcpclient.oauth.stored"] = "lua/mcpclient/oauth/stored.lua",
    ["mcpclient.session"] = "lua/mcpclient/session.lua",
    ["mcpclient.settings"] = "lua/mcpclient/settings.lua",
    ["mcpclient.skills"] = "lua/mcpclient/skills.lua",
    ["mcpclient.suggest"] = "lua/mcpclient/suggest.lua",
    ["mcpclient.task"] = "lua/mcpclient/task.lua",
    ["mcpclient.uri_template"] = "lua/mcpclient/uri_template.lua",
    ["mcpclient.trace"] = "lua/mcpclient/trace.lua",
  },
  install = { bin = { mcpclient = "bin/mcpclient" } },
}
-- `luarocks test` builds the C core into build/ first (the specs load it from there), then runs busted;
-- arguments after `--` go to busted (`luarocks test -- --exclude-tags=integration`).
test = { type = "command", command = "make --no-print-directory all && busted" }
