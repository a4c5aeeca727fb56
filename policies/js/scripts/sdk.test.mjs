// Unit tests of sdk/policy.js for what YAML cases cannot reach: settings that
// are not an object, the safety nets in evaluate, message clipping.
//   node --test scripts/sdk.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  clip,
  condition,
  definePolicy,
  parseSettings,
  quorum,
  quorumConfirmed,
  reject,
  settingsSchema,
} from '../sdk/policy.js';

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
  assert.throws(() => parseSettings('{"ratio": null}', props), /ratio must be a number greater than 0 and at most 1, got null/);
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
  const v = p.evaluate({ settings: '{"ratio": 7}' });
  assert.equal(v.conditions[0].message, '0.8');
  assert.deepEqual(v.events.map((e) => [e.type, e.reason]), [['warning', 'InvalidSettings']]);
  assert.deepEqual([v.readyMembers, v.verified, v.requeueAfterMs], [0, false, undefined]);
});

test('evaluate: an exception becomes an Unknown verdict naming it', () => {
  const p = definePolicy({ name: 'p', version: '1', evaluate: (o) => o.missing.field });
  const v = p.evaluate({ settings: '{}' });
  assert.deepEqual(v.conditions.map((c) => [c.type, c.status, c.reason]), [
    ['Available', 'unknown', 'PolicyError'],
    ['Degraded', 'unknown', 'PolicyError'],
  ]);
  assert.match(v.conditions[0].message, /TypeError/);
  assert.equal(v.verified, false);
});

test('quorumConfirmed follows the host: the first leader named, listed voters, a quorum read', () => {
  const answer = (id, leader) => ({ member: `m${id}`, endpoint: '', outcome: { tag: 'answered', val: { memberId: id, leaderId: leader } } });
  const obs = (endpoints, read = { tag: 'succeeded' }) => ({
    probing: {
      tag: 'attempted',
      val: {
        endpoints,
        memberList: { tag: 'listed', val: [1n, 2n, 3n].map((id) => ({ id, name: `m${id}`, isLearner: false })) },
        quorumRead: read,
      },
    },
  });
  assert.equal(quorumConfirmed(obs([answer(1n, 1n), answer(2n, 1n)])).confirmed, true);
  assert.equal(quorumConfirmed(obs([answer(1n, 1n), answer(2n, 1n)], { tag: 'not-attempted' })).confirmed, false);
  // A minority naming another leader first: the host counts that leader only.
  assert.equal(quorumConfirmed(obs([answer(3n, 3n), answer(1n, 1n), answer(2n, 1n)])).confirmed, false);
  assert.equal(quorumConfirmed({ probing: { tag: 'skipped', val: 'why' } }).confirmed, false);
});
