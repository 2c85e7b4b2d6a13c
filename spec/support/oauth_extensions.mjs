// The extension grants of spec/support/oauth_server.mjs: DPoP proofs (RFC 9449) checked the way an
// authorization server and a resource server check them, the RFC 8693 token exchange of an
// identity provider, and the RFC 7523 JWT bearer grant.
import crypto from 'node:crypto';

const b64 = (value) => Buffer.from(value).toString('base64url');

// The JWK thumbprint (RFC 7638) of an EC public key: the key a DPoP token is bound to.
export function thumbprint(jwk) {
  return crypto.createHash('sha256')
    .update(JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x, y: jwk.y })).digest('base64url');
}

// Check a DPoP proof for one request. Returns { ok, why, claims, jkt }: every rule of RFC 9449
// section 4.3 this server can check (typ, alg, a public jwk without "d", the signature, jti, htm,
// htu without query or fragment, iat within 60 s, ath for a token, the nonce when one is wanted,
// a jti never seen before).
export function checkProof(header, { method, url, accessToken, nonce, seen }) {
  if (typeof header !== 'string' || header === '' || header.includes(',')) return { ok: false, why: 'no single DPoP header' };
  const parts = header.split('.');
  if (parts.length !== 3) return { ok: false, why: 'not a compact JWS' };
  let head, claims;
  try {
    head = JSON.parse(Buffer.from(parts[0], 'base64url').toString());
    claims = JSON.parse(Buffer.from(parts[1], 'base64url').toString());
  } catch { return { ok: false, why: 'undecodable' }; }
  if (head.typ !== 'dpop+jwt') return { ok: false, why: 'typ', claims };
  if (head.alg !== 'ES256') return { ok: false, why: 'alg', claims };
  if (!head.jwk || head.jwk.d !== undefined || head.jwk.kty !== 'EC' || head.jwk.crv !== 'P-256') {
    return { ok: false, why: 'jwk', claims };
  }
  const key = crypto.createPublicKey({ key: head.jwk, format: 'jwk' });
  const signed = crypto.verify('sha256', Buffer.from(`${parts[0]}.${parts[1]}`), { key, dsaEncoding: 'ieee-p1363' },
    Buffer.from(parts[2], 'base64url'));
  if (!signed) return { ok: false, why: 'signature', claims };
  if (typeof claims.jti !== 'string' || claims.jti.length < 16) return { ok: false, why: 'jti', claims };
  if (seen.has(claims.jti)) return { ok: false, why: 'replayed', claims };
  seen.add(claims.jti);
  if (claims.htm !== method) return { ok: false, why: 'htm', claims };
  if (claims.htu !== url.split(/[?#]/)[0] || /[?#]/.test(claims.htu)) return { ok: false, why: 'htu', claims };
  if (typeof claims.iat !== 'number' || Math.abs(Date.now() / 1000 - claims.iat) > 60) return { ok: false, why: 'iat', claims };
  if (accessToken !== undefined) {
    const ath = crypto.createHash('sha256').update(accessToken).digest('base64url');
    if (claims.ath !== ath) return { ok: false, why: 'ath', claims };
  } else if (claims.ath !== undefined) return { ok: false, why: 'ath without a token', claims };
  if (nonce !== undefined && claims.nonce !== nonce) return { ok: false, why: 'use_dpop_nonce', claims };
  return { ok: true, claims, jkt: thumbprint(head.jwk) };
}

// An identity assertion grant (ID-JAG) as an identity provider issues one: a JWT, unsigned here
// (alg none) since only this server reads it back.
export function idJag(claims) {
  return `${b64(JSON.stringify({ alg: 'none', typ: 'oauth-id-jag+jwt' }))}.${b64(JSON.stringify(claims))}.`;
}

export function readJag(assertion) {
  try {
    const [head, body] = assertion.split('.');
    const header = JSON.parse(Buffer.from(head, 'base64url').toString());
    if (header.typ !== 'oauth-id-jag+jwt') return null;
    return JSON.parse(Buffer.from(body, 'base64url').toString());
  } catch { return null; }
}
