// Prints a private JWKS with one freshly generated signing key.
//
//   node make-jwks.mjs ec|rsa|ed25519 [KID] > jwks.json
//
// ec = P-256 / ES256, rsa = 2048-bit / RS256, ed25519 = Ed25519 / EdDSA.

import * as crypto from 'node:crypto';

const [type = 'ec', kid = `${type}-${crypto.randomBytes(4).toString('hex')}`] = process.argv.slice(2);

const kinds = {
  ec: { alg: 'ES256', gen: () => crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }) },
  rsa: { alg: 'RS256', gen: () => crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }) },
  ed25519: { alg: 'EdDSA', gen: () => crypto.generateKeyPairSync('ed25519') },
};

const kind = kinds[type];
if (!kind) {
  process.stderr.write('usage: node make-jwks.mjs ec|rsa|ed25519 [KID]\n');
  process.exit(2);
}

const { privateKey } = kind.gen();
const jwk = { ...privateKey.export({ format: 'jwk' }), kid, use: 'sig', alg: kind.alg };
process.stdout.write(`${JSON.stringify({ keys: [jwk] }, null, 2)}\n`);
