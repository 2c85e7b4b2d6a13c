--- The operator command as the specs run it: the repository's bin/mcpclient under lua5.4, with no
--- user data directory (XDG_DATA_HOME points nowhere, so only the --db a spec names is used), or
--- its main in this process with its output kept; and the fresh databases it runs against.
local backends = require "support.backends"
local peers = require "support.peers"
local shell = require "support.shell"

local cli = {}

--- The command line: `env` ("NAME=value" words set for this command only; nil for none), then
--- `--db db` when db is given, then each argument, quoted.
function cli.command(db, env, ...)
  local words = { "XDG_DATA_HOME=/nonexistent/mcpclient-spec" }
  for _, setting in ipairs(env or {}) do words[#words + 1] = setting end
  words[#words + 1] = "lua5.4"
  words[#words + 1] = shell.quote(peers.root .. "/bin/mcpclient")
  if db then words[#words + 1] = "--db " .. shell.quote(db) end
  for _, a in ipairs { ... } do words[#words + 1] = shell.quote(a) end
  return table.concat(words, " ")
end

--- Run a command line to its end. → exit code, stdout, stderr
function cli.run(command)
  local errfile = os.tmpname()
  local pipe = assert(io.popen(command .. " 2>" .. shell.quote(errfile), "r"))
  local out = pipe:read("a")
  local _, _, code = pipe:close()
  local err = shell.read_all(errfile)
  os.remove(errfile)
  return code, out, err
end

--- `mcpclient [--db db] ...`. → exit code, stdout, stderr
function cli.mcpclient(db, ...)
  return cli.run(cli.command(db, nil, ...))
end

--- A writable sink for the command run in this process: :write collects what it is given,
--- :flush does nothing, :text() is all of it.
function cli.sink()
  local parts = {}
  return setmetatable(parts, { __index = {
    write = function(self, ...) for _, s in ipairs { ... } do self[#self + 1] = s end return self end,
    flush = function() end,
    text = function(self) return table.concat(self) end,
  } })
end

--- The operator command run in this process (mcpclient.agent.cli's main) with `env` (its store,
--- options, ...; no progress line unless env.progress says so), its output in sinks.
--- → exit code, stdout, stderr
function cli.main(argv, env)
  local out, err = cli.sink(), cli.sink()
  env = env or {}
  env.stdout, env.stderr = out, err
  if env.progress == nil then env.progress = false end
  local code = require("mcpclient.agent.cli").main(argv, env)
  return code, out:text(), err:text()
end

--- A fresh database: an SQLite file, or a schema of its own when the run is on PostgreSQL.
function cli.fresh_db()
  local path = os.tmpname()
  os.remove(path)
  return backends.fresh(path .. ".db")
end

--- Remove an SQLite database and the files beside it.
function cli.remove_db(path)
  for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(path .. suffix) end
end

return cli
