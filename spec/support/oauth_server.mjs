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
//   POST /token               authorization_code (PKCE checked), refresh_token, client_credentials and
//                             jwt-bearer grants; with DPoP on, a valid proof is required and the token
//                             is DPoP-bound (oauth_extensions.mjs)
//   POST /idp/token           an identity provider's token exchange (RFC 8693): an ID token for an ID-JAG
//   POST /register            dynamic client registration
//   POST /_config             set behaviour: { expires_in, authorization_server, stall_token, iss_supported,
//                             iss ("exact" | "slash" | "other" | "none": the iss the redirect carries),
//                             drop_state, metadata_issuer (a string, or "" for none), echo_field (the token
//                             endpoint refuses, echoing that form field in its error_description),
//                             token_delay_ms, no_refresh (issue no refresh tokens), revoke (true: every access token issued so far is refused),
//                             dpop (true: DPoP as above), dpop_as_nonce / dpop_rs_nonce ("none" | "once": one
//                             use_dpop_nonce challenge, then the nonce is wanted | "rotate": a new nonce every time),
//                             dpop_token_type (what the token response names), assertion (the JWT bearer
//                             assertion the token endpoint takes; another is invalid_grant), id_token (the
//                             subject token the identity provider takes) }
//   GET  /_state              what arrived: [{ method, path, grant_type, token, authorization, scheme, dpop: { ok,
//                             why, claims }, form (of /idp/token and the jwt-bearer grant, secrets named only) }]
import crypto from 'node:crypto';
import http from 'node:http';
import { checkProof, idJag, readJag } from './oauth_extensions.mjs';

export const TOKEN_MARK = 'oauthspecSECRET';
const defaults = {
  expires_in: 3600, authorization_server: null, stall_token: false, iss_supported: false, iss: 'none',
  drop_state: false, metadata_issuer: null, echo_field: null, token_delay_ms: 0, no_refresh: false,
  dpop: false, dpop_as_nonce: 'none', dpop_rs_nonce: 'none', dpop_token_type: 'DPoP', assertion: null,
  id_token: null,
};
const config = { ...defaults };
const log = [];
const tokens = new Map();   // access token -> expiry (ms)
const refreshTokens = new Set();
const codes = new Map();    // code -> code_challenge
const bound = new Map();    // DPoP-bound access token -> the key's thumbprint
const jtis = new Set();     // every DPoP proof id seen: a second use is a replay
const nonces = { as: null, rs: null, count: 0 };
let counter = 0;
let base = '';

function json(res, status, value, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(value));
}

function issue(jkt) {
  counter += 1;
  const access = `tok-${TOKEN_MARK}-${counter}`;
  const refresh = `ref-${TOKEN_MARK}-${counter}`;
  tokens.set(access, Date.now() + config.expires_in * 1000);
  refreshTokens.add(refresh);
  const type = jkt ? config.dpop_token_type : 'Bearer';
  if (jkt) bound.set(access, jkt);
  if (config.no_refresh) return { access_token: access, token_type: type, expires_in: config.expires_in };
  return { access_token: access, token_type: type, expires_in: config.expires_in, refresh_token: refresh };
}

// A DPoP check for a request, recorded in the log. "once": the first request of a side is
// challenged with a new nonce, later proofs must carry it; "rotate": every request is challenged
// with a new nonce (a server that never lets the client through). A challenge is answered with
// use_dpop_nonce by the caller.
function proofFor(req, side, method, path, accessToken) {
  const mode = side === 'as' ? config.dpop_as_nonce : config.dpop_rs_nonce;
  let challenge;
  if (mode === 'rotate' || (mode === 'once' && nonces[side] === null)) {
    nonces.count += 1;
    nonces[side] = `n-${side}-${nonces.count}`;
    challenge = nonces[side];
  }
  const nonce = challenge || mode === 'none' ? undefined : nonces[side];
  const verdict = checkProof(req.headers.dpop, { method, url: `${base}${path}`, accessToken, nonce, seen: jtis });
  log[log.length - 1].dpop = { ok: verdict.ok, why: verdict.why, claims: verdict.claims };
  if (!challenge && verdict.why === 'use_dpop_nonce') challenge = nonces[side];
  return { challenge, verdict };
}

function mcp(req, res, body) {
  const auth = req.headers.authorization || '';
  const scheme = auth.split(' ')[0];
  const token = scheme === 'Bearer' || scheme === 'DPoP' ? auth.slice(scheme.length + 1) : null;
  log[log.length - 1].token = token;
  log[log.length - 1].scheme = scheme || null;
  if (config.dpop) {
    const challenge = (error) => json(res, 401, { error }, {
      'WWW-Authenticate': `DPoP error="${error}", algs="ES256", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
    });
    if (!token) return challenge('invalid_token');
    if (scheme !== 'DPoP' || !bound.has(token)) return challenge('invalid_token');
    const { challenge: nonce, verdict } = proofFor(req, 'rs', 'POST', '/mcp', token);
    if (nonce) {
      return json(res, 401, { error: 'use_dpop_nonce' }, {
        'WWW-Authenticate': `DPoP error="use_dpop_nonce", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
        'DPoP-Nonce': nonce,
      });
    }
    if (!verdict.ok || verdict.jkt !== bound.get(token)) return challenge('invalid_dpop_proof');
  }
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
  let jkt;
  if (config.dpop) {
    const { challenge, verdict } = proofFor(req, 'as', 'POST', '/token');
    if (challenge) {
      return json(res, 400, { error: 'use_dpop_nonce', error_description: 'a nonce is wanted' },
        { 'DPoP-Nonce': challenge });
    }
    if (!verdict.ok) return json(res, 400, { error: 'invalid_dpop_proof' });
    jkt = verdict.jkt;
  }
  if (grant === 'authorization_code') {
    const challenge = codes.get(form.get('code'));
    const verifier = form.get('code_verifier') || '';
    const computed = crypto.createHash('sha256').update(verifier).digest('base64url');
    if (!challenge || challenge !== computed) return json(res, 400, { error: 'invalid_grant' });
    codes.delete(form.get('code'));
    return json(res, 200, issue(jkt));
  }
  if (grant === 'refresh_token') {
    const presented = form.get('refresh_token');
    if (!refreshTokens.has(presented)) return json(res, 400, { error: 'invalid_grant' });
    refreshTokens.delete(presented);
    return json(res, 200, issue(jkt));
  }
  if (grant === 'urn:ietf:params:oauth:grant-type:jwt-bearer') {
    const assertion = form.get('assertion') || '';
    const jag = readJag(assertion);
    log[log.length - 1].form = { client_id: form.get('client_id'), scope: form.get('scope'),
      resource: form.get('resource'), assertion: assertion === config.assertion ? 'configured' : (jag ? 'id-jag' : 'other'),
      jag };
    if (jag ? jag.aud !== base : assertion !== config.assertion) {
      return json(res, 400, { error: 'invalid_grant', error_description: 'the assertion is not valid' });
    }
    return json(res, 200, issue(jkt));
  }
  if (grant === 'client_credentials') return json(res, 200, issue(jkt));
  json(res, 400, { error: 'unsupported_grant_type' });
}

// The identity provider's token exchange: the configured ID token for an ID-JAG naming the
// audience and resource asked for.
function idpToken(req, res, form) {
  log[log.length - 1].grant_type = form.get('grant_type');
  log[log.length - 1].form = Object.fromEntries([...form.entries()].map(([k, v]) =>
    [k, k === 'subject_token' ? (v === config.id_token ? 'configured' : 'other') : v]));
  if (form.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:token-exchange'
    || form.get('subject_token') !== config.id_token
    || form.get('subject_token_type') !== 'urn:ietf:params:oauth:token-type:id_token'
    || form.get('requested_token_type') !== 'urn:ietf:params:oauth:token-type:id-jag') {
    return json(res, 400, { error: 'invalid_request' });
  }
  const jag = idJag({ iss: `${base}/idp`, sub: 'user-1', aud: form.get('audience'), resource: form.get('resource'),
    client_id: form.get('client_id'), jti: crypto.randomUUID(), exp: Math.floor(Date.now() / 1000) + 300 });
  return json(res, 200, { access_token: jag, issued_token_type: 'urn:ietf:params:oauth:token-type:id-jag',
    token_type: 'N_A', expires_in: 300 });
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
        dpop_signing_alg_values_supported: config.dpop ? ['ES256'] : undefined,
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
    case '/idp/token': return idpToken(req, res, new URLSearchParams(body));
    case '/register': return json(res, 201, { client_id: 'spec-client', token_endpoint_auth_method: 'none' });
    case '/_config': {
      const given = JSON.parse(body);
      if (given.revoke) tokens.clear();   // every access token refused from now on; refresh tokens stay
      delete given.revoke;
      Object.assign(config, defaults, given);
      log.length = 0;
      Object.assign(nonces, { as: null, rs: null, count: 0 });
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
