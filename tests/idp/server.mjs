// Throwaway OpenID Provider for peergate's identity integration tests.
//
// A thin wrapper around panva's `oidc-provider` (MIT). Everything is configured
// from environment variables (see README.md); once listening it prints exactly
// one line to stdout, {"issuer":"http://127.0.0.1:PORT"}, and runs until killed.
//
// Only the client_credentials grant is offered. Access tokens are RFC 9068 JWTs
// (typ at+jwt) for the single resource IDP_AUDIENCE, signed with the FIRST key
// of IDP_JWKS_FILE. With features.mTLS.certificateBoundAccessTokens, clients
// registered with "tls_client_certificate_bound_access_tokens": true get tokens
// bound (cnf.x5t#S256) to the PEM certificate sent URL-encoded in the
// `x-client-cert` request header (there is no real TLS here).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';

const DEBUG = ['1', 'true', 'yes'].includes((process.env.IDP_DEBUG || '').toLowerCase());

// oidc-provider prints NOTICE lines with console.info (stdout) and WARNING lines
// with console.warn. stdout must carry only the one issuer line, so silence the
// console before the library is loaded (hence the dynamic import below).
if (DEBUG) {
  console.log = console.error; // keep stdout for the issuer line
  console.info = console.error;
} else {
  const noop = () => {};
  console.log = noop;
  console.info = noop;
  console.warn = noop;
  console.debug = noop;
  console.error = noop;
}

function fail(message) {
  process.stderr.write(`idp: ${message}\n`);
  process.exit(2);
}

function env(name, fallback) {
  const value = process.env[name];
  return value === undefined || value === '' ? fallback : value;
}

// ---- configuration from the environment ------------------------------------

const portText = env('IDP_PORT', '0');
const port = Number(portText);
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`IDP_PORT must be 0..65535, got ${portText}`);

const audience = env('IDP_AUDIENCE');
if (!audience) fail('IDP_AUDIENCE is required (the resource indicator / aud of access tokens)');
if (!URL.canParse(audience)) fail(`IDP_AUDIENCE must be an absolute URI, got ${audience}`);

const requireResource = ['1', 'true', 'yes'].includes((env('IDP_REQUIRE_RESOURCE', '')).toLowerCase());

const ttlText = env('IDP_TOKEN_TTL', '300');
const tokenTTL = Number(ttlText);
if (!Number.isInteger(tokenTTL) || tokenTTL <= 0) fail(`IDP_TOKEN_TTL must be a positive integer, got ${ttlText}`);

const jwksFile = env('IDP_JWKS_FILE');
if (!jwksFile) fail('IDP_JWKS_FILE is required (path of a private JWKS)');
let jwks;
try {
  jwks = JSON.parse(fs.readFileSync(jwksFile, 'utf8'));
} catch (err) {
  fail(`cannot read IDP_JWKS_FILE ${jwksFile}: ${err.message}`);
}
if (!Array.isArray(jwks?.keys) || jwks.keys.length === 0) fail('IDP_JWKS_FILE must hold {"keys":[...]} with at least one key');
const signingKey = jwks.keys[0];
if (!signingKey.d) fail('the first key of IDP_JWKS_FILE must be a private key (has no "d")');

// IDP_ALG, else the first key's own "alg", else ES256.
const alg = env('IDP_ALG', signingKey.alg || 'ES256');
const algKeyTypes = {
  ES256: (k) => k.kty === 'EC' && k.crv === 'P-256',
  RS256: (k) => k.kty === 'RSA',
  PS256: (k) => k.kty === 'RSA',
  EdDSA: (k) => k.kty === 'OKP' && k.crv === 'Ed25519',
};
if (!algKeyTypes[alg]) fail(`unsupported IDP_ALG ${alg} (ES256, RS256, PS256 or EdDSA)`);
if (!algKeyTypes[alg](signingKey) || (signingKey.alg && signingKey.alg !== alg)
    || (signingKey.use && signingKey.use !== 'sig')) {
  fail(`the first key of IDP_JWKS_FILE (kty ${signingKey.kty}, crv ${signingKey.crv}, alg ${signingKey.alg}, use ${signingKey.use}) cannot sign ${alg}`);
}

let clients;
try {
  clients = JSON.parse(env('IDP_CLIENTS', '[]'));
} catch (err) {
  fail(`IDP_CLIENTS is not JSON: ${err.message}`);
}
if (!Array.isArray(clients)) fail('IDP_CLIENTS must be a JSON array');

const RESOURCE_SCOPE = 'a2a:message a2a:tasks:read a2a:tasks:cancel a2a:push';

// Every scope the provider knows. Listing the resource-server scopes here too
// makes oidc-provider enforce each client's "scope" allow-list for them
// (requesting a scope outside it gives invalid_scope).
const scopes = new Set(['openid', 'offline_access', ...RESOURCE_SCOPE.split(' ')]);

// A client's "groups" (not client metadata) become a `groups` claim of its access tokens,
// as a directory-backed provider would add them.
const groupsByClient = new Map();

const clientMetadata = clients.map((c, i) => {
  if (!c || typeof c.client_id !== 'string' || typeof c.client_secret !== 'string') {
    fail(`IDP_CLIENTS[${i}] needs string client_id and client_secret`);
  }
  const { groups, ...metadata } = c;
  if (groups !== undefined) groupsByClient.set(c.client_id, groups);
  for (const s of (c.scope || '').split(' ').filter(Boolean)) scopes.add(s);
  return {
    token_endpoint_auth_method: 'client_secret_basic',
    ...metadata, // anything else is passed through as client metadata
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
  };
});

// ---- provider ----------------------------------------------------------------

const { default: Provider, errors } = await import('oidc-provider');

const server = http.createServer();
try {
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
} catch (err) {
  fail(`cannot listen on 127.0.0.1:${port}: ${err.message}`);
}
const issuer = `http://127.0.0.1:${server.address().port}`;

function getCertificate(ctx) {
  let value = ctx.get('x-client-cert');
  if (!value) return undefined;
  try {
    value = decodeURIComponent(value);
    if (!value.includes('-----BEGIN')) {
      // also accept bare base64 DER
      value = `-----BEGIN CERTIFICATE-----\n${value.replace(/\s+/g, '')}\n-----END CERTIFICATE-----\n`;
    }
    return new crypto.X509Certificate(value); // validates; oidc-provider hashes .raw
  } catch {
    return undefined;
  }
}

let provider;
try {
  provider = new Provider(issuer, {
    clients: clientMetadata,
    jwks,
    scopes: [...scopes],
    // Clients default to RS256 ID tokens, which fails metadata validation when
    // the keystore has no RSA key; no ID tokens are issued here anyway.
    clientDefaults: { id_token_signed_response_alg: alg },
    cookies: { keys: [crypto.randomBytes(32).toString('base64url')] },
    extraTokenClaims: async (_ctx, token) => {
      const groups = groupsByClient.get(token.clientId);
      return groups === undefined ? undefined : { groups };
    },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // With IDP_REQUIRE_RESOURCE, a request that names no resource (RFC 8707) gets no token
        // for it: an opaque token the door refuses.
        defaultResource: async (_ctx, _client, oneOf) => oneOf || (requireResource ? undefined : audience),
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, resourceIndicator) => {
          if (resourceIndicator !== audience) throw new errors.InvalidTarget();
          return {
            scope: RESOURCE_SCOPE,
            audience,
            accessTokenFormat: 'jwt',
            accessTokenTTL: tokenTTL,
            jwt: { sign: { alg, kid: signingKey.kid } },
          };
        },
      },
      mTLS: {
        enabled: true,
        certificateBoundAccessTokens: true,
        selfSignedTlsClientAuth: false,
        tlsClientAuth: false,
        getCertificate,
      },
    },
  });
} catch (err) {
  process.stderr.write(`idp: cannot configure oidc-provider: ${err.stack || err}\n`);
  process.exit(2);
}

for (const event of ['server_error', 'grant.error']) {
  provider.on(event, (_ctx, err) => {
    if (DEBUG || event === 'server_error') process.stderr.write(`idp: ${event}: ${err?.stack || err}\n`);
  });
}

// Static clients are validated lazily; load each now so a bad IDP_CLIENTS or
// key/alg mismatch fails at startup rather than at the first token request.
for (const { client_id: id } of clientMetadata) {
  try {
    if (!await provider.Client.find(id)) throw new Error('not found');
  } catch (err) {
    fail(`IDP_CLIENTS entry ${id} rejected: ${err.error_description || err.message}`);
  }
}

server.on('request', provider.callback());

const stop = () => {
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

process.stdout.write(`${JSON.stringify({ issuer })}\n`);
