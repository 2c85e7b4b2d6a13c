-- mcp.config.read: the configuration files people already have (Claude Desktop, Cursor, Claude Code,
-- Windsurf, VS Code, the registry's server.json) read into connect options, and every refusal naming
-- the file and the place.
local mcp = require "mcpclient"
local config = require "mcpclient.config"
local http = require "mcpclient.channel.http"

local DIR = "spec/fixtures/config/"

local function read(name, opts)
  return config.read(DIR .. name, opts)
end

-- The entry every stdio fixture server reads as, less what a test adds.
local function stdio(identifier, name, source, command, env)
  return { identifier = identifier, name = name, source = source,
    options = { identifier = identifier, name = name, command = command, env = env } }
end

describe("mcp.config", function()
  it("is loaded on first use from the library's table", function()
    assert.equal(config, mcp.config)
    assert.is_function(mcp.config.read)
  end)
end)

describe("config.read, an mcpServers file", function()
  it("reads Claude Desktop's servers into stdio options, in identifier order, a literal secret flagged", function()
    local servers = assert(read("claude_desktop_config.json"))
    local github = stdio("github", "github", "mcpServers.github",
      { "npx", "-y", "@modelcontextprotocol/server-github" },
      { GITHUB_PERSONAL_ACCESS_TOKEN = "ghp_0123456789abcdefABCDEF0123456789abcd" })
    github.secrets_inline = { "env.GITHUB_PERSONAL_ACCESS_TOKEN" }
    assert.same({
      stdio("filesystem", "filesystem", "mcpServers.filesystem", { "npx", "-y",
        "@modelcontextprotocol/server-filesystem", "/Users/username/Desktop", "/Users/username/Downloads" }),
      github,
      -- the name is lower-cased into the identifier, as the store keeps identifiers; the name stays
      stdio("memory", "Memory", "mcpServers.Memory", { "npx", "-y", "@modelcontextprotocol/server-memory" },
        { MEMORY_FILE_PATH = "/Users/username/memory.json" }),
    }, servers)
  end)

  it("reads Cursor's: ${env:VAR} as a reference, a bearer header as the credential, other headers beside", function()
    local servers = assert(read("cursor_mcp.json"))
    local python = stdio("python-tool", "python-tool", "mcpServers.python-tool", { "python", "mcp-server.py" },
      { API_KEY = "sk-live-abcdefghijklmnop" })
    python.secrets_inline = { "env.API_KEY" }
    assert.same({
      python,
      { identifier = "remote-docs", name = "remote-docs", source = "mcpServers.remote-docs",
        headers = { ["X-Team"] = "platform" },
        options = { identifier = "remote-docs", name = "remote-docs", url = "https://docs.example.com/mcp",
          auth = { placement = "bearer", credential = "env:DOCS_TOKEN" } } },
      stdio("web-search", "web-search", "mcpServers.web-search", { "npx", "-y", "mcp-server" },
        { API_KEY = "env:SEARCH_API_KEY", LOG_LEVEL = "info" }),
    }, servers)
  end)

  it("reads Claude Code's: type, ${VAR}, cwd, and a header reference as a header credential", function()
    local servers = assert(read("claude_code_mcp.json"))
    local db = stdio("local-db", "local-db", "mcpServers.local-db", { "/usr/local/bin/db-mcp", "--readonly" },
      { DB_PASSWORD = "env:DB_PASSWORD", DB_HOST = "localhost" })
    db.options.cwd = "/srv/db"
    assert.same({
      { identifier = "api-server", name = "api-server", source = "mcpServers.api-server",
        options = { identifier = "api-server", name = "api-server", url = "https://api.example.com/mcp",
          auth = { placement = "header", header_name = "X-API-Key", credential = "env:API_KEY" } } },
      db,
    }, servers)
  end)

  it("reads Windsurf's serverUrl; a literal bearer stays a header, flagged; disabled is said", function()
    local servers = assert(read("windsurf_mcp_config.json"))
    local git = stdio("git", "git", "mcpServers.git", { "uvx", "mcp-server-git", "--repository", "/home/me/project" })
    git.disabled = true
    assert.same({
      { identifier = "figma", name = "figma", source = "mcpServers.figma",
        headers = { Authorization = "Bearer figd_0123456789abcdefghijklmnopqrstuv" },
        secrets_inline = { "headers.Authorization" },
        options = { identifier = "figma", name = "figma", url = "https://mcp.figma.example/mcp" } },
      git,
    }, servers)
  end)
end)

describe("config.read, a VS Code file", function()
  it("answers ${input:…} from opts.inputs (a reference or a literal) and keeps ${env:…} a reference", function()
    local servers = assert(read("vscode_mcp.json", { inputs = { ["perplexity-key"] = "env:PPLX_KEY",
      workspace = "/home/me/ws" } }))
    local perplexity = stdio("perplexity", "Perplexity", "servers.Perplexity",
      { "npx", "-y", "server-perplexity-ask", "--workspace", "/home/me/ws" },
      { PERPLEXITY_API_KEY = "env:PPLX_KEY", HOME_DIR = "env:HOME" })
    perplexity.env_file = "${workspaceFolder}/.env"  -- handed back, never read
    assert.same({
      { identifier = "github", name = "github", source = "servers.github",
        options = { identifier = "github", name = "github", url = "https://api.githubcopilot.example/mcp/",
          auth = { placement = "bearer", credential = "env:PPLX_KEY" } } },
      perplexity,
    }, servers)
  end)

  it("refuses an unanswered input, naming it and its description from the file", function()
    local servers, message, err = read("vscode_mcp.json", { inputs = { workspace = "/w" } })
    assert.is_nil(servers)
    assert.equal("config", err.kind)
    assert.equal(DIR .. "vscode_mcp.json", err.file)
    assert.equal("servers.Perplexity.env.PERPLEXITY_API_KEY", err.where)
    assert.truthy(message:find('the input "perplexity-key" ("Perplexity API Key") is not answered', 1, true), message)
  end)

  it("refuses a reference answered into a command line, where only a literal can go", function()
    local _, message, err = read("vscode_mcp.json", { inputs = { workspace = "env:WS", ["perplexity-key"] = "x" } })
    assert.equal("servers.Perplexity.args[4]", err.where)
    assert.truthy(message:find("cannot be put in a command line", 1, true), message)
  end)

  it("reads the servers of a settings file's mcp object", function()
    local servers = assert(config.parse('{"mcp": {"servers": {"a": {"command": "srv"}}}}', "settings.json"))
    assert.same({ stdio("a", "a", "mcp.servers.a", { "srv" }) }, servers)
  end)
end)

describe("config.read, a registry server.json", function()
  it("gives one entry per package and per remote, with runner argv, env references and placeholders", function()
    local servers = assert(read("server.json", { inputs = { source_path = "/srv/data" } }))
    local name = "io.github.example/weather-server"
    assert.same({
      stdio("weather-server-npm", name, "packages[1]",
        { "npx", "-y", "@example/weather-mcp@1.2.0", "--units", "metric", "eu-west" },
        -- the secret as a reference to the host's variable; the default kept; an optional one without
        -- a value left out
        { WEATHER_API_KEY = "env:WEATHER_API_KEY", WEATHER_CACHE_DIR = "/tmp/weather" }),
      stdio("weather-server-pypi", name, "packages[2]", { "uvx", "weather-mcp==1.2.0" },
        { WEATHER_API_KEY = "env:WEATHER_API_KEY" }),
      -- docker is handed the variable by name (-e NAME): its value never reaches the command line
      stdio("weather-server-oci", name, "packages[3]", { "docker", "run", "-i", "--rm", "-e", "WEATHER_API_KEY",
        "--mount", "type=bind,src=/srv/data,dst=/data", "docker.io/example/weather-mcp:1.2.0" },
        { WEATHER_API_KEY = "env:WEATHER_API_KEY" }),
      { identifier = "weather-server-remote", name = name, source = "remotes[1]",
        headers = { ["X-Client"] = "mcpclient" },
        options = { identifier = "weather-server-remote", name = name, url = "https://weather.example.com/eu/mcp",
          -- an unanswered header placeholder becomes a reference to the variable of its name
          auth = { placement = "bearer", credential = "env:WEATHER_TOKEN" } } },
    }, servers)
  end)

  it("refuses an unanswered placeholder of an argument, naming it and its description", function()
    local _, message, err = read("server.json")
    assert.equal("packages[3].runtimeArguments[1].value", err.where)
    assert.truthy(message:find('the placeholder {source_path} ("Directory to share") is not answered', 1, true),
      message)
  end)

  it("answers a header placeholder from opts.inputs", function()
    local servers = assert(read("server.json", { inputs = { source_path = "/d", weather_token = "env:WT" } }))
    assert.same({ placement = "bearer", credential = "env:WT" }, servers[4].options.auth)
  end)

  it("refuses the sse transport, naming it", function()
    local _, message, err = read("sse_remote.json")
    assert.equal("remotes[1].type", err.where)
    assert.truthy(message:find('"sse"', 1, true), message)
  end)

  local function one(pkg)
    return config.parse('{"name": "io.example/My Server!", "packages": [' .. pkg .. ']}', "server.json")
  end

  it("derives identifiers from the server's name, valid and unique", function()
    local servers = assert(config.parse('{"name": "io.example/My Server!", "packages": ['
      .. '{"registryType": "npm", "identifier": "a"}, {"registryType": "npm", "identifier": "b", "version": "2"}],'
      .. '"remotes": [{"type": "streamable-http", "url": "https://x.example/mcp"}]}', "server.json"))
    assert.equal("my-server-npm", servers[1].identifier)
    assert.same({ "npx", "-y", "a" }, servers[1].options.command)
    assert.equal("my-server-npm-2", servers[2].identifier)
    assert.same({ "npx", "-y", "b@2" }, servers[2].options.command)
    assert.equal("my-server-remote", servers[3].identifier)
    local long = assert(config.parse('{"name": "io.example/' .. string.rep("x", 40) .. '", "packages": ['
      .. '{"registryType": "pypi", "identifier": "a"}]}', "server.json"))
    assert.equal(string.rep("x", 27) .. "-pypi", long[1].identifier)
  end)

  it("keeps an oci image that is pinned already, and refuses what it cannot run", function()
    local servers = assert(one('{"registryType": "oci", "identifier": "ghcr.io/o/img:3", "version": "1"}'))
    assert.same({ "docker", "run", "-i", "--rm", "ghcr.io/o/img:3" }, servers[1].options.command)
    local _, message, err = one('{"registryType": "nuget", "identifier": "A"}')
    assert.equal("packages[1].registryType", err.where)
    assert.truthy(message:find('"nuget" is not supported', 1, true))
    _, _, err = one('{"registryType": "npm", "identifier": "--inspect"}')
    assert.equal("packages[1].identifier", err.where)
    _, message, err = one('{"registryType": "npm", "identifier": "a", "transport": {"type": "streamable-http"}}')
    assert.equal("packages[1].transport.type", err.where)
    assert.truthy(message:find("only a package spoken to over stdio", 1, true))
    _, message, err = one('{"registryType": "npm", "identifier": "a", "packageArguments": '
      .. '[{"type": "positional", "valueHint": "dir", "isRequired": true}]}')
    assert.equal("packages[1].packageArguments[1]", err.where)
    assert.truthy(message:find('the required argument "dir" has no value', 1, true))
  end)
end)

describe("config.read refuses", function()
  it("a file that is not JSON, naming the file, the line and the column", function()
    local servers, message, err = read("not_json.json")
    assert.is_nil(servers)
    assert.equal("config", err.kind)
    assert.equal("line 3 column 28", err.where)
    assert.truthy(message:find('The configuration file "' .. DIR .. 'not_json.json"', 1, true), message)
    assert.truthy(message:find("it is not JSON", 1, true))
  end)

  it("a value of the wrong type, naming its path", function()
    local _, message, err = read("bad_args.json")
    assert.equal("mcpServers.github.args[2]", err.where)
    assert.equal("must be a string", err.detail)
    assert.truthy(message:find("(at mcpServers.github.args[2]): must be a string", 1, true), message)
  end)

  it("a server name that is not an identifier, naming it", function()
    local _, message, err = read("bad_name.json")
    assert.equal('mcpServers["brave search"]', err.where)
    assert.truthy(message:find('the name "brave search" is not a usable identifier', 1, true), message)
  end)

  it("a file of none of the formats, and a file that cannot be opened", function()
    local _, message, err = read("neither.json")
    assert.is_nil(err.where)
    assert.truthy(message:find("none of the formats", 1, true))
    _, _, err = read("absent.json")
    assert.equal("config", err.kind)
    assert.equal(DIR .. "absent.json", err.file)
    _, _, err = config.parse("[1, 2]", "list.json")
    assert.equal("it is not a JSON object", err.detail)
  end)

  local function refused(text, where, words, opts)
    local servers, message, err = config.parse(text, "f.json", opts)
    assert.is_nil(servers, text)
    assert.equal("config", err.kind)
    assert.equal(where, err.where, text)
    assert.truthy(message:find(words, 1, true), message)
    return message
  end

  it("every shape error, at its place", function()
    refused('{"mcpServers": []}', "mcpServers", "must be an object")
    refused('{"mcpServers": {"a": {"command": "x", "url": "https://h.example/"}}}', "mcpServers.a", "not both")
    refused('{"mcpServers": {"a": {}}}', "mcpServers.a", "neither command nor url")
    refused('{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}', "mcpServers.a.env.K", "must be a string")
    refused('{"mcpServers": {"a": {"command": "x", "env": {"1K": "v"}}}}', 'mcpServers.a.env["1K"]',
      "letters, digits and _")
    refused('{"mcpServers": {"a": {"type": "ws", "url": "https://h.example/"}}}', "mcpServers.a.type",
      '"ws" is not one of')
    refused('{"mcpServers": {"a": {"type": "sse", "url": "https://h.example/sse"}}}', "mcpServers.a.type",
      '"sse"')
    refused('{"mcpServers": {"a": {"url": "ftp://h.example/"}}}', "mcpServers.a.url", "not a usable URL")
    refused('{"mcpServers": {"GitHub": {"command": "x"}, "github": {"command": "y"}}}', "mcpServers.github",
      'is also the identifier of mcpServers.GitHub')
    refused('{"mcpServers": {"' .. string.rep("a", 33) .. '": {"command": "x"}}}',
      "mcpServers." .. string.rep("a", 33), "not a usable identifier")
    refused('{"mcpServers": {"a": {"url": "https://h.example/", "headers": {"Bad Name": "v"}}}}',
      'mcpServers.a.headers["Bad Name"]', "is not an HTTP header name")
  end)

  it("a variable where only a literal can go, or one this reader does not know", function()
    refused('{"mcpServers": {"a": {"command": "x", "args": ["--token", "${env:T}"]}}}', "mcpServers.a.args[2]",
      "cannot be put in a command line")
    refused('{"mcpServers": {"a": {"url": "https://h.example/${HOST}"}}}', "mcpServers.a.url",
      "cannot be put in a command line or URL")
    refused('{"mcpServers": {"a": {"command": "x", "env": {"T": "pre-${env:T}"}}}}', "mcpServers.a.env.T",
      "must be the whole value")
    refused('{"mcpServers": {"a": {"command": "x", "env": {"T": "${T:-d}"}}}}', "mcpServers.a.env.T",
      "has a default")
    refused('{"mcpServers": {"a": {"command": "x", "env": {"T": "${env:1x}"}}}}', "mcpServers.a.env.T",
      "does not name an environment variable")
    refused('{"servers": {"a": {"command": "x", "args": ["${workspaceFolder}"]}}}', "servers.a.args[1]",
      "${workspaceFolder} is the editor's own variable")
    -- where a bare ${NAME} is an environment variable, the editor's own ones still are not
    refused('{"mcpServers": {"a": {"command": "x", "env": {"H": "${userHome}"}}}}', "mcpServers.a.env.H",
      "${userHome} is the editor's own variable")
    refused('{"servers": {"a": {"command": "x", "env": {"H": "${HOME}"}}}}', "servers.a.env.H",
      "${HOME} is not a variable this reader knows")
    refused('{"mcpServers": {"a": {"command": "x", "env": {"T": "${unclosed"}}}}', "mcpServers.a.env.T",
      "an unclosed ${")
    -- a literal the file wrote is never taken for a reference to the host's environment
    refused('{"mcpServers": {"a": {"command": "x", "env": {"T": "env:AWS_SECRET"}}}}', "mcpServers.a.env.T",
      'a literal value starting with "env:"')
    refused('{"name": "n", "packages": [{"registryType": "npm", "identifier": "p", "environmentVariables": '
      .. '[{"name": "T", "default": "env:HOME"}]}]}', "packages[1].environmentVariables[1].default",
      'a literal value starting with "env:"')
  end)

  it("with far-side text from the file only through the text rule", function()
    local message = refused('{"mcpServers": {"a\\u001b[31m\\u202ebad": {"command": "x"}}}', 'mcpServers["a [31m bad"]',
      "", nil)
    assert.is_nil(message:find("\27", 1, true))
    assert.is_nil(message:find("\226\128\174", 1, true))  -- U+202E
    assert.truthy(message:find("is not a usable identifier", 1, true))
  end)

  it("the format the caller names, when the file is not of it", function()
    refused('{"mcpServers": {"a": {"command": "x"}}}', "servers", "must be an object", { format = "vscode" })
    refused('{"mcpServers": {}}', "name", "must be a string", { format = "server.json" })
  end)
end)

describe("config.read's secrets written in the file", function()
  local function flagged(env, args)
    local text = '{"mcpServers": {"a": {"command": "x", "args": ' .. args .. ', "env": ' .. env .. '}}}'
    return (assert(config.parse(text, "f.json"))[1].secrets_inline)
  end

  it("are named by a secret-sounding name part or a token-shaped value, and kept", function()
    assert.same({ "env.API_KEY", "env.DB_PASSWORD", "env.OPENAI_APIKEY", "env.SLACK_ACCESSTOKEN" },
      flagged('{"API_KEY": "abc", "DB_PASSWORD": "hunter2", "OPENAI_APIKEY": "x1", "SLACK_ACCESSTOKEN": "t",'
        .. '"GIT_AUTHOR_NAME": "Jane", "MONKEY_COUNT": "3", "DEBUG_AUTH": "false", "TOKEN_TTL": "3600"}', "[]"))
    assert.same({ "command[2]", "command[4]", "env.SOME_VALUE" },
      flagged('{"SOME_VALUE": "aB3dE5fG7hJ9kL1mN3pQ5rS7", "NAME": "mcp-server-everything-2024"}',
        '["--token=ghp_abcdefghijklmnop", "--dir", "0123456789abcdef0123456789abcdef", "/home/me/AbC123dEf456GhI789"]'))
    assert.is_nil(flagged('{"PATH_ROOT": "/srv/data", "KEY_FILE": ""}', '["@scope/pkg", "mcp-server-everything-2024"]'))
  end)

  it("are not flagged when they are references", function()
    assert.is_nil(flagged('{"API_KEY": "${env:API_KEY}", "TOKEN": "${TOKEN}"}', "[]"))
  end)
end)

describe("config.read, misuse", function()
  it("raises for a path that is not a string and for unknown or wrong options", function()
    assert.has_error(function() config.read(42) end, "config.read: path must be a string")
    assert.has_error(function() config.read("x.json", { foramt = "vscode" }) end)
    assert.has_error(function() config.read("x.json", { format = "toml" }) end)
    assert.has_error(function() config.read("x.json", { inputs = { key = 1 } }) end)
    assert.has_error(function() config.read("x.json", "vscode") end)
    assert.has_error(function() config.read("x.json", { inputs = { key = "env:not a name" } }) end)
    assert.has_error(function() config.parse(nil, "x.json") end)
  end)
end)

describe("config.read's options", function()
  -- A channel that fails the test if anything would be sent.
  local function silent_channel()
    local channel = {}
    for _, method in ipairs(http.CONTRACT) do
      channel[method] = function() error("the channel was used: " .. method) end
    end
    channel.close = function() return true end
    return channel
  end

  it("are accepted by mcp.connect, which opens and closes without a process or a request", function()
    local inputs = { ["perplexity-key"] = "env:K", workspace = "/w", source_path = "/d" }
    local checked = 0
    for _, file in ipairs { "claude_desktop_config.json", "cursor_mcp.json", "claude_code_mcp.json",
      "windsurf_mcp_config.json", "vscode_mcp.json", "server.json" } do
      for _, entry in ipairs(assert(read(file, { inputs = inputs }))) do
        local options = {}
        for k, v in pairs(entry.options) do options[k] = v end
        options.health = mcp.health.discard
        if options.command then
          options.transport = { spawn = function() error("a process was started") end }
        else
          options.channel = silent_channel()
        end
        local conn = mcp.connect(options)
        assert.equal(entry.identifier, conn.identifier)
        conn:close()
        checked = checked + 1
      end
    end
    assert.equal(16, checked)
  end)
end)
