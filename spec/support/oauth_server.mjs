// A scripted MCP server behind OAuth, with its own authorization server, for
// spec/integration/oauth_spec.lua. One process on 127.0.0.1; prints
// "listening <port>" first and runs until it is killed.
//
//   POST /mcp                 MCP (initialize, notifications, tools/list, tools/call); needs a Bearer
//                             token this server issued and that has not expired, else 401 with a
//                             resource_metadata challenge
//   GET  /.well-known/oauth-protected-resource/mcp   protected resource metadata
//   GET  /.well-known/oauth-authorization-server     authorization server metadata
//   GET  /authorize           302 to redirect_uri with code and state (no person)
//   POST /token               authorization_code (PKCE checked) and refresh_token grants
//   POST /register            dynamic client registration
//   POST /_config             set behaviour: { expires_in, authorization_server, stall_token, iss_supported,
//                             iss ("exact" | "slash" | "other" | "none": the iss the redirect carries),
//                             drop_state, metadata_issuer (a string, or "" for none), echo_field (the token
//                             endpoint refuses, echoing that form field in its error_description),
//                             token_delay_ms, no_refresh (issue no refresh tokens), revoke (true: every access token issued so far is refused) }
//   GET  /_state              what arrived: [{ method, path, grant_type, token, authorization }]
import crypto from 'node:crypto';
import http from 'node:http';

export const TOKEN_MARK = 'oauthspecSECRET';
const defaults = {
  expires_in: 3600, authorization_server: null, stall_token: false, iss_supported: false, iss: 'none',
  drop_state: false, metadata_issuer: null, echo_field: null, token_delay_ms: 0, no_refresh: false,
};
const config = { ...defaults };
const log = [];
const tokens = new Map();   // access token -> expiry (ms)
const refreshTokens = new Set();
const codes = new Map();    // code -> code_challenge
let counter = 0;
let base = '';

function json(res, status, value, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(value));
}

function issue() {
  counter += 1;
  const access = `tok-${TOKEN_MARK}-${counter}`;
  const refresh = `ref-${TOKEN_MARK}-${counter}`;
  tokens.set(access, Date.now() + config.expires_in * 1000);
  refreshTokens.add(refresh);
  if (config.no_refresh) return { access_token: access, token_type: 'Bearer', expires_in: config.expires_in };
  return { access_token: access, token_type: 'Bearer', expires_in: config.expires_in, refresh_token: refresh };
}

function mcp(req, res, body) {
  const auth = req.headers.authorization || '';
  const token = auth.startsWith('Bearer ') ? auth.slice(7) : null;
  log[log.length - 1].token = token;
  const expiry = token && tokens.get(token);
  if (!expiry || expiry < Date.now()) {
    return json(res, 401, { error: 'invalid_token' }, {
      'WWW-Authenticate': `Bearer error="invalid_token", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
    });
  }
  const msg = JSON.parse(body);
  log[log.length - 1].rpc = msg.method;
  if (msg.id === undefined) { res.writeHead(202); return res.end(); }
  const results = {
    initialize: { protocolVersion: '2025-11-25', capabilities: { tools: {} }, serverInfo: { name: 'oauth-spec', version: '1' } },
    'tools/list': { tools: [{ name: 'echo', inputSchema: { type: 'object' } }] },
    'tools/call': { content: [{ type: 'text', text: 'echoed' }] },
    ping: {},
  };
  json(res, 200, { jsonrpc: '2.0', id: msg.id, result: results[msg.method] || {} });
}

function token(req, res, form) {
  const grant = form.get('grant_type');
  log[log.length - 1].grant_type = grant;
  if (config.stall_token) return;   // never answers: the client's budget must end it
  if (config.token_delay_ms > 0 && !form.has('_delayed')) {
    form.set('_delayed', '1');
    return setTimeout(() => token(req, res, form), config.token_delay_ms);
  }
  if (config.echo_field) {
    const sent = form.get(config.echo_field) || '';
    return json(res, 400, { error: `invalid_grant ${sent}`,
      error_description: `the ${config.echo_field} ${sent} (${encodeURIComponent(sent)}) is not valid` });
  }
  if (grant === 'authorization_code') {
    const challenge = codes.get(form.get('code'));
    const verifier = form.get('code_verifier') || '';
    const computed = crypto.createHash('sha256').update(verifier).digest('base64url');
    if (!challenge || challenge !== computed) return json(res, 400, { error: 'invalid_grant' });
    codes.delete(form.get('code'));
    return json(res, 200, issue());
  }
  if (grant === 'refresh_token') {
    const presented = form.get('refresh_token');
    if (!refreshTokens.has(presented)) return json(res, 400, { error: 'invalid_grant' });
    refreshTokens.delete(presented);
    return json(res, 200, issue());
  }
  json(res, 400, { error: 'unsupported_grant_type' });
}

function route(req, res, body) {
  const url = new URL(req.url, base);
  log.push({ method: req.method, path: url.pathname, authorization: req.headers.authorization !== undefined });
  switch (url.pathname) {
    case '/mcp': return mcp(req, res, body);
    case '/.well-known/oauth-protected-resource/mcp':
      return json(res, 200, { resource: `${base}/mcp`, authorization_servers: [config.authorization_server || base] });
    case '/.well-known/oauth-authorization-server':
      return json(res, 200, {
        issuer: config.metadata_issuer === null ? base : (config.metadata_issuer || undefined),
        authorization_response_iss_parameter_supported: config.iss_supported || undefined,
        authorization_endpoint: `${base}/authorize`, token_endpoint: `${base}/token`,
        registration_endpoint: `${base}/register`, response_types_supported: ['code'],
        code_challenge_methods_supported: ['S256'], token_endpoint_auth_methods_supported: ['none'],
        grant_types_supported: ['authorization_code', 'refresh_token'],
      });
    case '/authorize': {
      const code = `code-${counter}-${Math.random()}`;
      codes.set(code, url.searchParams.get('code_challenge'));
      const back = new URL(url.searchParams.get('redirect_uri'));
      back.searchParams.set('code', code);
      if (!config.drop_state) back.searchParams.set('state', url.searchParams.get('state'));
      const iss = { exact: base, slash: `${base}/`, other: 'http://127.0.0.1:1' }[config.iss];
      if (iss) back.searchParams.set('iss', iss);
      res.writeHead(302, { Location: back.toString() });
      return res.end();
    }
    case '/token': return token(req, res, new URLSearchParams(body));
    case '/register': return json(res, 201, { client_id: 'spec-client', token_endpoint_auth_method: 'none' });
    case '/_config': {
      const given = JSON.parse(body);
      if (given.revoke) tokens.clear();   // every access token refused from now on; refresh tokens stay
      delete given.revoke;
      Object.assign(config, defaults, given);
      log.length = 0;
      return json(res, 200, config);
    }
    case '/_state': log.pop(); return json(res, 200, log);
    default: return json(res, 404, { error: 'not_found' });
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => route(req, res, Buffer.concat(chunks).toString()));
});
server.listen(0, '127.0.0.1', () => {
  base = `http://127.0.0.1:${server.address().port}`;
  process.stdout.write(`listening ${server.address().port}\n`);
});
