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
}
build = {
  type = "builtin",
  modules = {
    ["mcpclient.core"] = {
      sources = {
        "csrc/core.c", "csrc/json.c", "csrc/sse.c", "csrc/http.c",
        "csrc/clock.c", "csrc/address.c", "csrc/text.c", "csrc/schema.c", "csrc/sqlite.c",
      },
      libraries = { "curl", "jansson", "sqlite3" },
      incdirs = { "$(CURL_INCDIR)", "$(JANSSON_INCDIR)", "$(SQLITE_INCDIR)" },
      libdirs = { "$(CURL_LIBDIR)", "$(JANSSON_LIBDIR)", "$(SQLITE_LIBDIR)" },
      defines = { "_POSIX_C_SOURCE=200809L" },
    },
    ["mcpclient"] = "lua/mcpclient/init.lua",
  },
  install = { bin = { mcpclient = "bin/mcpclient" } },
}
test = { type = "command", command = "busted" }
