// Unit tests of sdk/policy.js for what YAML cases cannot reach: settings that
// are not an object, the safety nets in evaluate, message clipping, how the
// host's finding reaches evaluate and how a verdict declines it.
//   node --test scripts/sdk.test.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  clip,
  condition,
  definePolicy,
  parseSettings,
  quorum,
  readObservation,
  readQuorum,
  reject,
  settingsSchema,
} from '../sdk/policy.js';

const verified = (leader, voters = [], agreeing = []) => ({
  tag: 'verified',
  val: { leader, voters: BigUint64Array.from(voters), agreeing: BigUint64Array.from(agreeing) },
});
const unverified = (kind, message = 'why') => ({ tag: 'unverified', val: { kind, message } });

const props = { ratio: { type: 'number', exclusiveMinimum: 0, maximum: 1, default: 0.8 } };

test('quorum is floor(n/2)+1', () => {
  assert.deepEqual([0, 1, 2, 3, 4, 5].map(quorum), [1, 1, 2, 2, 3, 3]);
});

test('settings: defaults, empty text, non-objects, bad JSON', () => {
  assert.deepEqual(parseSettings('{}', props), { ratio: 0.8 });
  assert.deepEqual(parseSettings('  ', props), { ratio: 0.8 });
  assert.deepEqual(parseSettings('{"ratio": 0.5}', props), { ratio: 0.5 });
  assert.throws(() => parseSettings('[1]', props), /expected a JSON object, got an array/);
  assert.throws(() => parseSettings('null', props), /expected a JSON object, got null/);
  assert.throws(() => parseSettings('{"ratio":', props), /not JSON/);
  assert.throws(() => parseSettings('{"x": 1}'), /unknown field "x"; this policy takes no settings/);
  assert.throws(() => parseSettings('{"ratio": 2, "zz": 1}', props), /unknown field "zz"/);
  assert.throws(() => parseSettings('{"ratio": null}', props), /ratio must be a number greater than 0 and at most 1, got null/);
});

// The Python SDK checks the same table (policies/python/tests/test_sdk.py):
// one wording for one error, whichever SDK a policy is written with.
test('settings errors are worded as the table both SDKs check says', () => {
  const table = JSON.parse(readFileSync(new URL('./settings-errors.json', import.meta.url), 'utf8'));
  let n = 0;
  for (const { fields, cases } of table.groups) {
    for (const c of cases) {
      n++;
      let got;
      let error;
      try {
        got = parseSettings(c.settings, fields);
      } catch (e) {
        assert.ok(e instanceof Error, `${c.settings}: threw ${e}`);
        error = e.message;
      }
      if (c.accepted) assert.deepEqual(got, c.accepted, c.settings);
      else if (c.errorStartsWith) assert.ok(error?.startsWith(c.errorStartsWith), `${c.settings}: ${error}`);
      else assert.equal(error, c.error, c.settings);
    }
  }
  assert.ok(n > 20);
});

test('the schema is the properties, closed', () => {
  const schema = JSON.parse(settingsSchema(props, 't'));
  assert.equal(schema.additionalProperties, false);
  assert.deepEqual(schema.properties, props);
});

test('clip cuts at 1 KiB of UTF-8 at a character boundary', () => {
  const long = 'é'.repeat(600); // 1200 bytes
  const cut = clip(long);
  assert.ok(Buffer.byteLength(cut) <= 1024, `${Buffer.byteLength(cut)}`);
  assert.ok(cut.endsWith('…'));
  assert.equal(clip('short'), 'short');
  assert.equal(condition('A', null, 'R').status, 'unknown');
  assert.equal(condition('A', 'True', 'R').status, 'true');
});

test('validateSettings throws the message (result::err); check() can reject', () => {
  const p = definePolicy({
    name: 'p',
    version: '1',
    settings: props,
    check: (s) => s.ratio === 1 && reject('ratio 1 leaves no headroom'),
    evaluate: () => ({ conditions: [] }),
  });
  assert.equal(p.validateSettings('{}'), undefined);
  assert.throws(() => p.validateSettings('{"ratio": 1}'), (e) => e === 'ratio 1 leaves no headroom');
  assert.equal(p.describe().settingsSchema, settingsSchema(props, 'p settings'));
});

test('evaluate: invalid settings fall back to defaults with a Warning event', () => {
  const p = definePolicy({
    name: 'p',
    version: '1',
    settings: props,
    evaluate: (_, s) => ({ conditions: [condition('Available', true, 'R', String(s.ratio))] }),
  });
  const v = p.evaluate({ settings: '{"ratio": 7}', quorum: verified(1n) });
  assert.equal(v.conditions[0].message, '0.8');
  assert.deepEqual(v.events.map((e) => [e.type, e.reason]), [['warning', 'InvalidSettings']]);
  // Left out: nothing ready, the host's finding accepted, no hint.
  assert.deepEqual([v.readyMembers, v.declineVerification, v.requeueAfterMs], [0, undefined, undefined]);
  assert.ok(!('verified' in v));
});

test('evaluate: an exception becomes an Unknown verdict naming it', () => {
  const p = definePolicy({ name: 'p', version: '1', evaluate: (o) => o.missing.field });
  const v = p.evaluate({ settings: '{}', quorum: verified(1n) });
  assert.deepEqual(v.conditions.map((c) => [c.type, c.status, c.reason]), [
    ['Available', 'unknown', 'PolicyError'],
    ['Degraded', 'unknown', 'PolicyError'],
  ]);
  assert.match(v.conditions[0].message, /TypeError/);
  // Like the host's own fallback, it does not let the status show verified.
  assert.match(v.declineVerification, /^the policy's evaluate threw: TypeError/);
});

test('evaluate receives the host\'s finding, read: verified, leader, voters, agreeing', () => {
  let seen;
  const p = definePolicy({
    name: 'p',
    version: '1',
    evaluate: (o) => {
      seen = o.quorum;
      return { conditions: [] };
    },
  });
  p.evaluate({ settings: '{}', quorum: verified(2n, [1n, 2n, 3n], [2n, 3n]) });
  assert.deepEqual(
    [seen.tag, seen.verified, seen.leader, seen.voters, seen.agreeing, seen.unverified],
    ['verified', true, 2n, [1n, 2n, 3n], [2n, 3n], undefined],
  );
  assert.ok(Array.isArray(seen.voters), 'plain arrays, not BigUint64Array');
  p.evaluate({ settings: '{}', quorum: unverified('no-quorum', 'a linearizable read failed') });
  assert.deepEqual(
    [seen.tag, seen.verified, seen.leader, seen.voters, seen.agreeing, seen.unverified],
    ['unverified', false, undefined, [], [], { kind: 'no-quorum', message: 'a linearizable read failed' }],
  );
  // No leader named: verified all the same.
  assert.equal(readQuorum(verified(undefined)).leader, undefined);
  assert.equal(readQuorum(verified(undefined)).verified, true);
  // Read once; reading again changes nothing.
  const once = readQuorum(unverified('unreachable'));
  assert.equal(readQuorum(once), once);
  assert.equal(readObservation({ quorum: once, now: 1n }).quorum, once);
  assert.throws(() => readQuorum(undefined), /not the host's finding/);
});

test('evaluate receives the backup facts as the host sent them, undefined when none', () => {
  const seen = [];
  const policy = definePolicy({
    name: 'p',
    version: '1',
    evaluate: (obs) => {
      seen.push(obs.backup);
      return { conditions: [condition('Available', true, 'R'), condition('Degraded', false, 'R')] };
    },
  });
  const backup = { schedule: 'nightly', scheduleCreated: 1790000000000n, intervalMs: 86400000n, lastSuccess: 1795993200000n };
  policy.evaluate({ settings: '{}', quorum: verified(1n), backup, now: 1796169600000n });
  policy.evaluate({ settings: '{}', quorum: verified(1n), now: 1796169600000n });
  assert.deepEqual(seen, [backup, undefined]);
});

test('evaluate receives the TLS facts as the host sent them, all false without them', () => {
  const seen = [];
  const policy = definePolicy({
    name: 'p',
    version: '1',
    evaluate: (obs) => {
      seen.push(obs.tls);
      return { conditions: [condition('Available', true, 'R'), condition('Degraded', false, 'R')] };
    },
  });
  const tls = {
    client: true,
    clientCertAuth: true,
    peer: true,
    certificates: [
      { role: 'serving', secret: 'etcd-server-tls', notBefore: 1790000000000n, notAfter: 1797000000000n },
      { role: 'peer', secret: 'etcd-peer-tls', notBefore: 1790000000000n, notAfter: 1798000000000n },
      { role: 'operator-client', secret: 'etcd-operator-client-tls', notBefore: 1790000000000n, notAfter: 1796256000000n },
    ],
  };
  policy.evaluate({ settings: '{}', quorum: verified(1n), tls, now: 1796169600000n });
  policy.evaluate({ settings: '{}', quorum: verified(1n), now: 1796169600000n });
  assert.deepEqual(seen, [tls, { client: false, clientCertAuth: false, peer: false, certificates: [] }]);
  const soonest = seen[0].certificates.reduce((a, b) => (b.notAfter < a.notAfter ? b : a));
  assert.deepEqual([soonest.role, soonest.notAfter - 1796169600000n], ['operator-client', 86400000n]);
  assert.equal(readObservation({ quorum: verified(1n), tls, now: 1n }).tls, tls);
});

test('a verdict declines the finding with a reason, and cannot claim verification', () => {
  const policyReturning = (parts) =>
    definePolicy({ name: 'p', version: '1', evaluate: () => ({ conditions: [condition('Available', true, 'R')], ...parts }) });
  const obs = { settings: '{}', quorum: verified(1n) };
  assert.equal(policyReturning({ declineVerification: 'two voters short of the spec' }).evaluate(obs).declineVerification, 'two voters short of the spec');
  assert.equal(policyReturning({}).evaluate(obs).declineVerification, undefined);
  assert.equal(policyReturning({ declineVerification: null }).evaluate(obs).declineVerification, undefined);
  // 0.1.0's `verified`, or a decline that is not a reason, is the policy's error, said as one.
  const old = policyReturning({ verified: true }).evaluate(obs);
  assert.equal(old.conditions[0].reason, 'PolicyError');
  assert.match(old.conditions[0].message, /no 'verified' since steward:status@0\.2\.0/);
  const bad = policyReturning({ declineVerification: true }).evaluate(obs);
  assert.match(bad.conditions[0].message, /declineVerification must be a string/);
});
