// The etcd-steward status-policy SDK for JavaScript.
//
// A policy is an ES module exporting `policy`, the object componentize-js
// binds to the WIT interface `steward:status/policy@0.1.0` (see wit/):
//
//   import { definePolicy, condition } from './sdk/policy.js';
//   export const policy = definePolicy({ name, version, settings, evaluate });
//
// The author writes decisions only; this module turns them into describe,
// validate-settings and evaluate. Values arrive the way componentize-js maps
// WIT (types in wit.d.ts): records are objects with camelCase fields, enums
// are kebab-case strings ('scaling-up'), variants are {tag, val}, an absent
// option is undefined, and u64/s64 (member IDs, sizes, timestamps) are BigInt.
//
// The policy runs with no clock, files, network or stdio: nothing here may
// use Date, Math.random, console or timers. The only time is observation.now.

export const AVAILABLE = 'Available';
export const DEGRADED = 'Degraded';

/** etcd's backend quota when spec.options.quotaBackendBytes is unset: 2 GiB. */
export const DEFAULT_QUOTA_BACKEND_BYTES = 2 * 1024 ** 3;

/** The host rejects a verdict whose condition or event message is longer. */
export const MAX_MESSAGE_BYTES = 1024;

// ---------------------------------------------------------------- etcd facts

/** Votes a raft cluster of n voting members needs: floor(n/2) + 1. */
export function quorum(n) {
  return Math.floor(n / 2) + 1;
}

/** etcd prints member IDs in hex; so do messages. */
export function hex(id) {
  return id == null ? '?' : id.toString(16);
}

/** The backend quota in bytes (a Number: quotas are far below 2^53). */
export function quotaBytes(observation) {
  const q = observation.spec.quotaBackendBytes;
  return q == null ? DEFAULT_QUOTA_BACKEND_BYTES : Number(q);
}

/** The probe report, or undefined when the host could not probe at all. */
export function probeReport(observation) {
  return observation.probing.tag === 'attempted' ? observation.probing.val : undefined;
}

/** Endpoints whose Status RPC answered: [{member, endpoint, status}]. */
export function answered(observation) {
  const report = probeReport(observation);
  if (!report) return [];
  return report.endpoints
    .filter((p) => p.outcome.tag === 'answered')
    .map((p) => ({ member: p.member, endpoint: p.endpoint, status: p.outcome.val }));
}

/** Endpoints probed without an answer: [{member, endpoint, error}]. */
export function failed(observation) {
  const report = probeReport(observation);
  if (!report) return [];
  return report.endpoints
    .filter((p) => p.outcome.tag === 'failed')
    .map((p) => ({ member: p.member, endpoint: p.endpoint, error: p.outcome.val }));
}

/**
 * The voting members, each with its Status answer (`status`) or probe error
 * (`error`) when it has one: [{name, id, status?, error?}].
 *
 * etcd's own MemberList decides who votes when it answered (the EtcdMembers
 * may lag behind a promotion or removal); otherwise the EtcdMembers with role
 * voter. A listed member that never started has no name; the EtcdMember with
 * its ID, or else the hex ID, names it.
 */
export function votingMembers(observation) {
  const report = probeReport(observation);
  const list = report && report.memberList.tag === 'listed' ? report.memberList.val : undefined;
  const voters = list
    ? list
        .filter((m) => !m.isLearner)
        .map((m) => ({
          name: m.name || observation.members.find((k) => k.memberId === m.id)?.name || hex(m.id),
          id: m.id,
        }))
    : observation.members.filter((m) => m.role === 'voter').map((m) => ({ name: m.name, id: m.memberId }));
  const probes = report ? report.endpoints : [];
  return voters.map((voter) => {
    // An answer is matched by member ID when both are known (etcd's own
    // word for who answered), else by the member the endpoint belongs to;
    // an answer from another member ID at that endpoint (a member re-created
    // under the same name) is not this voter answering.
    const sameId = (p) => voter.id == null || p.outcome.tag !== 'answered' || p.outcome.val.memberId === voter.id;
    const probe =
      (voter.id != null &&
        probes.find((p) => p.outcome.tag === 'answered' && p.outcome.val.memberId === voter.id)) ||
      probes.find((p) => p.member === voter.name && sameId(p));
    if (!probe) return voter;
    return probe.outcome.tag === 'answered'
      ? { ...voter, status: probe.outcome.val }
      : { ...voter, error: probe.outcome.val };
  });
}

/**
 * Whether etcd confirmed a quorum the way the host checks it before it
 * accepts `verified: true` (host/src/facts/quorum.rs): etcd listed its
 * members, the linearizable quorum read succeeded, and a quorum of the listed
 * voters answered Status naming the first non-zero leader any answer names.
 * A verdict claiming more is thrown away by the host, so claim exactly this.
 *
 * Returns {confirmed: true, leader, voters, agreeing} or {confirmed: false, why}.
 */
export function quorumConfirmed(observation) {
  const report = probeReport(observation);
  if (!report) return { confirmed: false, why: `etcd was not probed: ${observation.probing.val}` };
  if (report.memberList.tag !== 'listed') {
    return { confirmed: false, why: "etcd's member list could not be read" };
  }
  if (report.quorumRead.tag !== 'succeeded') {
    return {
      confirmed: false,
      why:
        report.quorumRead.tag === 'failed'
          ? `the quorum read failed: ${report.quorumRead.val.message}`
          : 'no quorum read was made',
    };
  }
  const voters = report.memberList.val.filter((m) => !m.isLearner).map((m) => m.id);
  const statuses = answered(observation).map((a) => a.status);
  const leader = statuses.map((s) => s.leaderId).find((l) => l !== 0n);
  if (leader === undefined) return { confirmed: false, why: 'no member reports a leader' };
  const agreeing = statuses.filter((s) => s.leaderId === leader && voters.includes(s.memberId)).length;
  if (voters.length === 0 || agreeing < quorum(voters.length)) {
    return {
      confirmed: false,
      why: `only ${agreeing} of ${voters.length} voters answer with leader ${hex(leader)}`,
    };
  }
  return { confirmed: true, leader, voters: voters.length, agreeing };
}

// ------------------------------------------------------ conditions and events

/**
 * A condition. `status` is true, false, or anything else for unknown (null
 * reads well: "we cannot tell"). The message is cut to the host's limit so a
 * long member list can never get the whole verdict rejected.
 */
export function condition(type, status, reason, message = '') {
  return { type, status: statusOf(status), reason, message: clip(message) };
}

/** A Warning event on the EtcdCluster, beyond the host's own. */
export function warning(reason, message) {
  return { type: 'warning', reason, message: clip(message) };
}

/** A Normal event on the EtcdCluster. */
export function normal(reason, message) {
  return { type: 'normal', reason, message: clip(message) };
}

function statusOf(status) {
  if (status === true || status === 'true' || status === 'True') return 'true';
  if (status === false || status === 'false' || status === 'False') return 'false';
  return 'unknown';
}

/** Cuts text to at most `max` UTF-8 bytes, at a character boundary, marking the cut. */
export function clip(text, max = MAX_MESSAGE_BYTES) {
  text = String(text);
  if (utf8Length(text) <= max) return text;
  let bytes = 3; // the ellipsis
  let end = 0;
  for (const ch of text) {
    const n = utf8Length(ch);
    if (bytes + n > max) break;
    bytes += n;
    end += ch.length;
  }
  return text.slice(0, end) + '…';
}

function utf8Length(text) {
  let n = 0;
  for (const ch of text) {
    const c = ch.codePointAt(0);
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  return n;
}

// ------------------------------------------------------------------ settings

/** Thrown (via reject) when settings are unacceptable; the message reaches the user. */
export class SettingsError extends Error {}

/** Refuses the settings with a message the user will read in a condition. */
export function reject(message) {
  throw new SettingsError(message);
}

/**
 * Parses settings JSON text against `properties`, a map from field name to
 * its JSON Schema (`type` number/integer/boolean/string, `default`, and
 * optionally minimum, maximum, exclusiveMinimum, exclusiveMaximum, enum).
 * Returns the defaults overlaid with the given values; rejects unknown
 * fields, wrong types and values out of range, naming the field. One map
 * serves both this check and describe()'s schema, so they cannot disagree.
 */
export function parseSettings(json, properties = {}) {
  let value;
  try {
    value = json.trim() === '' ? {} : JSON.parse(json);
  } catch (e) {
    reject(`invalid settings: not JSON: ${e.message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    reject(`invalid settings: expected a JSON object, got ${kindOf(value)}`);
  }
  const settings = {};
  for (const [key, schema] of Object.entries(properties)) settings[key] = schema.default;
  for (const [key, v] of Object.entries(value)) {
    const schema = Object.hasOwn(properties, key) ? properties[key] : undefined;
    if (!schema) {
      const known = Object.keys(properties);
      reject(
        `invalid settings: unknown field "${key}"` +
          (known.length ? `; known fields: ${known.join(', ')}` : '; this policy takes no settings'),
      );
    }
    const problem = checkValue(v, schema);
    if (problem) reject(`invalid settings: ${key} must be ${problem}, got ${show(v)}`);
    settings[key] = v;
  }
  return settings;
}

/** The JSON Schema (text) describe() publishes for `properties`. */
export function settingsSchema(properties = {}, title = 'settings') {
  return JSON.stringify({
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title,
    type: 'object',
    additionalProperties: false,
    properties,
  });
}

/** What `v` fails to be, or undefined when it fits `schema`. */
function checkValue(v, schema) {
  const want = schema.type === 'integer' ? 'an integer' : `a ${schema.type}`;
  const fits =
    schema.type === 'integer'
      ? Number.isInteger(v)
      : schema.type === 'number'
        ? typeof v === 'number' && Number.isFinite(v)
        : typeof v === schema.type;
  const range = [];
  if (schema.exclusiveMinimum !== undefined) range.push(`greater than ${schema.exclusiveMinimum}`);
  if (schema.minimum !== undefined) range.push(`at least ${schema.minimum}`);
  if (schema.exclusiveMaximum !== undefined) range.push(`less than ${schema.exclusiveMaximum}`);
  if (schema.maximum !== undefined) range.push(`at most ${schema.maximum}`);
  if (schema.enum) range.push(`one of ${schema.enum.map(show).join(', ')}`);
  const expected = range.length ? `${want} ${range.join(' and ')}` : want;
  if (!fits) return expected;
  const inRange =
    !(schema.exclusiveMinimum !== undefined && !(v > schema.exclusiveMinimum)) &&
    !(schema.minimum !== undefined && !(v >= schema.minimum)) &&
    !(schema.exclusiveMaximum !== undefined && !(v < schema.exclusiveMaximum)) &&
    !(schema.maximum !== undefined && !(v <= schema.maximum)) &&
    !(schema.enum && !schema.enum.includes(v));
  return inRange ? undefined : expected;
}

function kindOf(v) {
  return v === null ? 'null' : Array.isArray(v) ? 'an array' : `a ${typeof v}`;
}

function show(v) {
  return typeof v === 'string' ? JSON.stringify(v) : Array.isArray(v) || v === null ? kindOf(v) : typeof v === 'object' ? 'an object' : String(v);
}

// ---------------------------------------------------------------------- glue

/**
 * Builds the `policy` export from plain functions:
 *
 *   name, version       what describe() reports (version: the policy's own)
 *   conditionTypes      the condition types the verdicts write
 *                       (default: Available and Degraded)
 *   settings            field name -> JSON Schema, see parseSettings
 *   check(settings)     optional cross-field check; call reject(message)
 *   evaluate(observation, settings) -> {conditions, readyMembers?,
 *                       verified?, requeueAfterMs?, events?}
 */
export function definePolicy({
  name,
  version,
  conditionTypes = [AVAILABLE, DEGRADED],
  settings: properties = {},
  check,
  evaluate,
}) {
  const schema = settingsSchema(properties, `${name} settings`);
  const parse = (json) => {
    const settings = parseSettings(json, properties);
    if (check) check(settings);
    return settings;
  };

  return {
    describe() {
      return { name, version, conditionTypes: [...conditionTypes], settingsSchema: schema };
    },

    // componentize-js turns a thrown string into result::err; returning is ok.
    validateSettings(json) {
      try {
        parse(json);
      } catch (e) {
        throw e instanceof SettingsError ? e.message : `settings check failed: ${errorText(e)}`;
      }
    },

    evaluate(observation) {
      // The host validates settings before it evaluates, so this is a safety
      // net: judge with the defaults and say so, rather than give no verdict.
      let settings;
      let problem;
      try {
        settings = parse(observation.settings);
      } catch (e) {
        problem = e instanceof SettingsError ? e.message : errorText(e);
        settings = parseSettings('{}', properties);
      }
      let verdict;
      try {
        verdict = complete(evaluate(observation, settings));
      } catch (e) {
        // With stdio disabled an uncaught exception would be a bare wasm
        // trap; the host would still fall back, but nobody would see the
        // JS error. This verdict claims nothing and carries the error text.
        const message = `the policy's evaluate threw: ${errorText(e)}`;
        verdict = complete({
          conditions: [
            condition(AVAILABLE, null, 'PolicyError', message),
            condition(DEGRADED, null, 'PolicyError', message),
          ],
          events: [warning('PolicyError', message)],
        });
      }
      if (problem) verdict.events.push(warning('InvalidSettings', `using default settings: ${problem}`));
      return verdict;
    },
  };
}

/** Fills the verdict fields a policy may leave out with "claims nothing". */
function complete(v) {
  return {
    conditions: v.conditions ?? [],
    readyMembers: v.readyMembers ?? 0,
    verified: v.verified ?? false,
    requeueAfterMs: v.requeueAfterMs ?? undefined,
    events: [...(v.events ?? [])],
  };
}

function errorText(e) {
  if (e instanceof Error) {
    // The first frame is enough: "fn@policy.js:12:5" in SpiderMonkey (and
    // "at fn (file:...)" under Node, after V8's repeat of the message).
    const head = `${e.name}: ${e.message}`;
    const frame = String(e.stack ?? '')
      .split('\n')
      .map((l) => l.trim())
      .find((l) => l && l !== head);
    return frame ? `${head} (${frame})` : head;
  }
  return String(e);
}
