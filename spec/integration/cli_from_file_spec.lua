-- `mcpclient add --from FILE [NAME ...]`: the servers of the configuration
-- files people already have (spec/fixtures/config: Claude Desktop, Cursor,
-- VS Code, a registry server.json) added disabled, with the `edit` commands
-- they still need; no secret stored; inputs answered with --input or on a
-- terminal; an existing server left alone unless --replace; a malformed file
-- refused naming the file and the place, with nothing added.
local backends = require "support.backends"
local cli = require "support.cli"
local core = require "mcpclient.core"

local json = core.json

local FIXTURES = "spec/fixtures/config/"

local function temp_file(content)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
  return path
end

-- Every stored text of the servers table, for "this secret is nowhere".
local function stored_text(store)
  local rows = assert(store.adapter:rows("SELECT * FROM mcp_server", {}))
  local parts = {}
  for _, row in ipairs(rows) do
    for _, v in pairs(row) do parts[#parts + 1] = tostring(v) end
  end
  return table.concat(parts, "\n")
end

local function no_escapes(text)
  assert.falsy(text:gsub("\n", ""):find("%c"), "control characters in: " .. text)
end

describe("mcpclient add --from (" .. backends.name .. ")", function()
  local store, asked

  before_each(function()
    store = backends.open_store()
    asked = {}
  end)

  after_each(function()
    store:close()
  end)

  -- The command in this process; `answers` stands for a person at a terminal (nil: no terminal).
  local function run(answers, ...)
    return cli.main({ ... }, { store = store, ask = function(question, secret)
      asked[#asked + 1] = { question = question, secret = secret }
      return answers and answers[#asked] or nil
    end })
  end

  local function by_identifier()
    local rows = {}
    for _, row in ipairs(assert(store:servers())) do rows[row.identifier] = row end
    return rows
  end

  it("adds every server of a Claude Desktop file, disabled, and says what each still needs", function()
    local code, out, err = run(nil, "add", "--from", FIXTURES .. "claude_desktop_config.json")
    assert.equal(0, code, err)
    local rows = by_identifier()
    assert.same({ "filesystem", "github", "memory" }, (function()
      local ids = {}
      for id in pairs(rows) do ids[#ids + 1] = id end
      table.sort(ids)
      return ids
    end)())
    for _, row in pairs(rows) do
      assert.is_false(row.enabled)
      assert.equal("", row.data_class)
    end
    assert.same({ "npx", "-y", "@modelcontextprotocol/server-filesystem", "/Users/username/Desktop",
      "/Users/username/Downloads" }, rows.filesystem.command)
    assert.same({ MEMORY_FILE_PATH = "/Users/username/memory.json" }, rows.memory.env)
    assert.equal("Memory", rows.memory.name)
    -- the token written in the file is not stored: the server reads the host's variable instead
    assert.same({ GITHUB_PERSONAL_ACCESS_TOKEN = "env:GITHUB_PERSONAL_ACCESS_TOKEN" }, rows.github.env)
    assert.falsy(stored_text(store):find("ghp_0123456789", 1, true))
    assert.falsy(out:find("ghp_0123456789", 1, true))
    assert.matches("env GITHUB_PERSONAL_ACCESS_TOKEN: the file's value looks like a secret and is not stored", out, 1,
      true)
    for _, id in ipairs { "filesystem", "github", "memory" } do
      assert.matches("Added server %d+ %(" .. id .. "%) from mcpServers%.%a+, disabled%.", out)
      assert.matches("`mcpclient edit " .. id .. " --data-class ", out, 1, true)
      assert.matches("`mcpclient edit " .. id .. " --enabled`", out, 1, true)
      assert.matches("`mcpclient edit " .. id .. " --approval no`", out, 1, true)
    end
  end)

  it("adds only the servers named (as identifiers: trimmed, any case), and refuses a name the file lacks", function()
    local code, out, err = run(nil, "add", "--from", FIXTURES .. "claude_desktop_config.json", "MEMORY", "github")
    assert.equal(0, code, err)
    local listed = assert(store:servers())
    assert.same({ "github", "memory" }, { listed[1].identifier, listed[2].identifier })
    assert.falsy(out:find("filesystem", 1, true))

    code, out, err = run(nil, "add", "--from", FIXTURES .. "claude_desktop_config.json", "filesystem", "nosuch")
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches('names no server "nosuch" (it names Memory, filesystem, github)', err, 1, true)
    assert.equal(2, #assert(store:servers()))
  end)

  it("keeps ${env:VAR} a reference and makes an Authorization header the credential (Cursor)", function()
    local code, out, err = run(nil, "add", "--from", FIXTURES .. "cursor_mcp.json", "--format", "cursor")
    assert.equal(0, code, err)
    local rows = by_identifier()
    assert.same({ API_KEY = "env:SEARCH_API_KEY", LOG_LEVEL = "info" }, rows["web-search"].env)
    local docs = rows["remote-docs"]
    assert.same({ "https://docs.example.com/mcp", "env:DOCS_TOKEN", "bearer", { ["X-Team"] = "platform" } },
      { docs.url, docs.auth_credential, docs.auth_placement, docs.headers })
    -- a literal key: not stored, the host's API_KEY instead
    assert.same({ API_KEY = "env:API_KEY" }, rows["python-tool"].env)
    assert.falsy(stored_text(store):find("sk-live", 1, true))
    assert.falsy(out:find("sk-live", 1, true))
  end)

  it("leaves an existing server alone; --replace replaces it (disabled, the operator's choices kept)", function()
    assert.equal(0, (run(nil, "add", "--identifier", "github", "--name", "Mine", "--url", "https://mine.example/mcp",
      "--data-class", "sourceCode", "--enabled", "--proxy", "none")))
    local code, out, err = run(nil, "add", "--from", FIXTURES .. "claude_desktop_config.json", "github")
    assert.equal(0, code, err)
    assert.matches("Skipped github from mcpServers.github: a server with the identifier github exists", out, 1, true)
    local row = by_identifier().github
    assert.same({ "Mine", "https://mine.example/mcp", true }, { row.name, row.url, row.enabled })

    code, out, err = run(nil, "--json", "add", "--from", FIXTURES .. "claude_desktop_config.json", "github",
      "--replace")
    assert.equal(0, code, err)
    local report = json.decode(out)
    assert.equal(1, #report.added)
    assert.is_true(report.added[1].replaced)
    row = by_identifier().github
    assert.same({ "", { "npx", "-y", "@modelcontextprotocol/server-github" }, false, "sourceCode", "" },
      { row.url, row.command, row.enabled, row.data_class, row.proxy })
    assert.equal(1, #assert(store:servers()))
  end)

  it("answers VS Code inputs from --input; refuses without a terminal; a password only by reference", function()
    local path = FIXTURES .. "vscode_mcp.json"
    local code, out, err = run(nil, "add", "--from", path)
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches('asks for the input "perplexity-key" (Perplexity API Key) and there is no terminal to ask on: '
      .. "answer it with --input perplexity-key=env:VAR", err, 1, true)
    assert.equal(0, #assert(store:servers()))

    code, out, err = run(nil, "add", "--from", path, "--input", "perplexity-key=pplx-literal-secret",
      "--input", "workspace=/w")
    assert.equal(2, code)
    assert.equal("", out)
    assert.matches("--input perplexity-key: the answer looks like a secret", err, 1, true)
    assert.falsy(err:find("pplx-literal-secret", 1, true))
    -- a password input, whatever its answer looks like
    local phrase = temp_file(json.encode { inputs = { { id = "phrase", description = "The phrase", password = true } },
      servers = { one = { command = "tool", env = { PHRASE = "${input:phrase}" } } } })
    finally(function() os.remove(phrase) end)
    code, out, err = run(nil, "add", "--from", phrase, "--input", "phrase=correct horse")
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches('"phrase" is a password: answer it with env:VAR', err, 1, true)
    assert.falsy(err:find("correct horse", 1, true))
    assert.equal(0, #assert(store:servers()))

    code, out, err = run(nil, "add", "--from", path, "--input", "perplexity-key=env:PPLX_KEY", "--input",
      "workspace=/srv/work")
    assert.equal(0, code, err)
    local rows = by_identifier()
    assert.same({ "npx", "-y", "server-perplexity-ask", "--workspace", "/srv/work" }, rows.perplexity.command)
    assert.same({ PERPLEXITY_API_KEY = "env:PPLX_KEY", HOME_DIR = "env:HOME" }, rows.perplexity.env)
    assert.same({ "env:PPLX_KEY", "bearer" }, { rows.github.auth_credential, rows.github.auth_placement })
    assert.matches('envFile "${workspaceFolder}/.env" is not read', out, 1, true)
  end)

  it("asks a person at the terminal for each input the selected servers use, a password without echo", function()
    local code, _, err = run({ "env:PPLX_KEY", "/srv/typed" }, "add", "--from", FIXTURES .. "vscode_mcp.json",
      "perplexity")
    assert.equal(0, code, err)
    assert.equal(2, #asked)
    assert.matches('"perplexity-key" (Perplexity API Key)', asked[1].question, 1, true)
    assert.is_true(asked[1].secret)
    assert.matches('"workspace" (Workspace to open)', asked[2].question, 1, true)
    assert.is_false(asked[2].secret)
    local row = assert(store:servers())[1]
    assert.same({ "perplexity", "/srv/typed" }, { row.identifier, row.command[5] })
  end)

  it("refuses without a terminal as a process whose stdin is not one", function()
    local db = os.tmpname()
    finally(function() for _, s in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(db .. s) end end)
    local command = cli.command(db, nil, "add", "--from", FIXTURES .. "vscode_mcp.json")
    local code, out, err = cli.run(command .. " </dev/null")
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches("there is no terminal to ask on: answer it with --input perplexity-key=env:VAR", err, 1, true)
  end)

  it("reads a registry server.json: inputs for its placeholders, one server per package and remote", function()
    local path = FIXTURES .. "server.json"
    local code, out, err = run(nil, "add", "--from", path)
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches("at packages[3].runtimeArguments[1].value", err, 1, true)
    assert.matches("{source_path}", err, 1, true)
    assert.matches("--input ID=env:VAR or ID=TEXT", err, 1, true)
    assert.equal(0, #assert(store:servers()))

    code, out, err = run(nil, "add", "--from", path, "--format", "server.json", "--input", "source_path=/srv/data")
    assert.equal(0, code, err)
    assert.matches("Added server %d+ %(weather%-server%-remote%) from remotes%[1%]", out)
    local rows = by_identifier()
    assert.same({ "npx", "-y", "@example/weather-mcp@1.2.0", "--units", "metric", "eu-west" },
      rows["weather-server-npm"].command)
    assert.equal("env:WEATHER_API_KEY", rows["weather-server-npm"].env.WEATHER_API_KEY)
    assert.same({ "uvx", "weather-mcp==1.2.0" }, rows["weather-server-pypi"].command)
    assert.equal("docker", rows["weather-server-oci"].command[1])
    local remote = rows["weather-server-remote"]
    assert.same({ "https://weather.example.com/eu/mcp", "env:WEATHER_TOKEN", "bearer", { ["X-Client"] = "mcpclient" } },
      { remote.url, remote.auth_credential, remote.auth_placement, remote.headers })
  end)

  it("turns a literal secret header into the credential, refuses a secret in a command line", function()
    local path = temp_file(json.encode { mcpServers = {
      api = { url = "https://api.example.com/mcp",
        headers = { ["X-Api-Key"] = "k-3c1d9b2aX7Qp0Lz8Vw4Nr6", ["X-Team"] = "a" } },
      cli = { command = "tool", args = { "--token", "ghp_0123456789abcdefABCDEF0123456789abcd" } },
      plain = { command = "tool" },
    } })
    finally(function() os.remove(path) end)
    local code, out, err = run(nil, "add", "--from", path)
    assert.equal(1, code)
    local rows = by_identifier()
    assert.same({ "env:API_X_API_KEY", "header", "X-Api-Key", { ["X-Team"] = "a" } },
      { rows.api.auth_credential, rows.api.auth_placement, rows.api.auth_header_name, rows.api.headers })
    assert.matches("header X-Api-Key: the file's value looks like a secret and is not stored; it is sent from "
      .. "API_X_API_KEY", out, 1, true)
    assert.is_nil(rows.cli)
    assert.matches("Not added: cli from mcpServers.cli", err, 1, true)
    assert.matches("command[3] looks like a secret written in the command line", err, 1, true)
    assert.truthy(rows.plain)
    local text = stored_text(store) .. out .. err
    assert.falsy(text:find("k-3c1d9b2aX7Qp0Lz8Vw4Nr6", 1, true))
    assert.falsy(text:find("ghp_0123456789", 1, true))
  end)

  it("refuses a malformed file naming the file and the place, adding nothing", function()
    for name, place in pairs { ["not_json.json"] = "at line", ["bad_args.json"] = "at mcpServers.github.args[2]",
      ["neither.json"] = "none of the formats", ["sse_remote.json"] = "sse" } do
      local code, out, err = run(nil, "add", "--from", FIXTURES .. name)
      assert.equal(1, code, name)
      assert.equal("", out)
      assert.matches('The configuration file "' .. FIXTURES .. name .. '" cannot be used', err, 1, true)
      assert.matches(place, err, 1, true)
    end
    local code, _, err = run(nil, "add", "--from", FIXTURES .. "claude_desktop_config.json", "--format", "vscode")
    assert.equal(1, code)
    assert.matches("cannot be used", err, 1, true)
    code, _, err = run(nil, "add", "--from", "/nonexistent/mcp.json")
    assert.equal(1, code)
    assert.matches('"/nonexistent/mcp.json" cannot be used: it could not be opened', err, 1, true)
    local out
    code, out = run(nil, "--json", "add", "--from", FIXTURES .. "not_json.json")
    assert.equal(1, code)
    assert.equal("config", json.decode(out).kind)
    assert.equal(0, #assert(store:servers()))
  end)

  it("keeps the file's text inert on the terminal", function()
    local path = temp_file(json.encode { inputs = { { id = "k\27[31mey", description = "evil\27]0;title\7\nline",
      password = true } }, servers = { one = { command = "tool", env = { K = "${input:k\27[31mey}" } } } })
    finally(function() os.remove(path) end)
    local code, out, err = run(nil, "add", "--from", path)
    assert.equal(1, code)
    assert.equal("", out)
    no_escapes(err)
    assert.matches("no terminal to ask on", err, 1, true)
    no_escapes(asked[1].question)
  end)

  it("takes --from with --format, --replace and --input only; those only with --from", function()
    local code, _, err = run(nil, "add", "--from", FIXTURES .. "cursor_mcp.json", "--data-class", "sourceCode")
    assert.equal(2, code)
    assert.matches("--data-class goes with `mcpclient edit`", err, 1, true)
    code, _, err = run(nil, "add", "--from", FIXTURES .. "cursor_mcp.json", "--format", "yaml")
    assert.equal(2, code)
    assert.matches("--format is claude, cursor, windsurf, vscode or server.json", err, 1, true)
    code, _, err = run(nil, "add", "--identifier", "x", "--name", "X", "--url", "https://x/mcp", "--replace")
    assert.equal(2, code)
    assert.matches("--replace goes with --from FILE", err, 1, true)
    code, _, err = run(nil, "add", "--from", FIXTURES .. "vscode_mcp.json", "--input", "novalue")
    assert.equal(2, code)
    assert.matches("--input takes ID=env:VAR", err, 1, true)
    -- an answer that looks like a secret is not taken as text, on the command line or at the terminal
    code, _, err = run(nil, "add", "--from", FIXTURES .. "server.json", "--input",
      "weather_token=wt-9f8e7d6c5b4a3F2e1D0c")
    assert.equal(2, code)
    assert.matches("looks like a secret", err, 1, true)
    assert.falsy(err:find("wt-9f8e7d6c5b4a3F2e1D0c", 1, true))
    code, _, err = run({ "env:PPLX_KEY", "ws-8a7B6c5D4e3F2g1H0i9J" }, "add", "--from", FIXTURES .. "vscode_mcp.json",
      "perplexity")
    assert.equal(1, code)
    assert.matches('The answer to "workspace" looks like a secret', err, 1, true)
    assert.falsy(err:find("ws-8a7B6c5D4e3F2g1H0i9J", 1, true))
    assert.equal(0, #assert(store:servers()))
  end)
end)
