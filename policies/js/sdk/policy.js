// The etcd-steward status-policy SDK for JavaScript.
//
// A policy is an ES module exporting `policy`, the object componentize-js
// binds to the WIT interface `steward:status/policy@0.4.0` (see wit/):
//
//   import { definePolicy, condition } from './sdk/policy.js';
//   export const policy = definePolicy({ name, version, settings, evaluate });
//
// The author writes decisions only; this module turns them into describe,
// validate-settings and evaluate. Values arrive the way componentize-js maps
// WIT (types in wit.d.ts): records are objects with camelCase fields, enums
// are kebab-case strings ('scaling-up'), variants are {tag, val}, an absent
// option is undefined, and u64/s64 (member IDs, sizes, timestamps) are BigInt.
// One field differs: evaluate gets `observation.quorum`, the host's finding,
// read by readQuorum (`quorum.verified`, `.leader`, `.unverified`, ...).
// `observation.tls` is always there: an observation without one (written by
// hand) reads as a cluster without spec.tls.
//
// Verification is the host's: a verdict cannot claim it, only decline it
// (`declineVerification: 'reason'`), and the host rejects Available=True while
// its finding shows no quorum or no member answered.
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
 * The host's finding (the WIT variant `observation.quorum`), read for a
 * policy. It is the one definition of a verified quorum: a linearizable read
 * went through raft, and the leader is the one the most answering voters name.
 * A policy takes it as it is and derives no verification of its own.
 *
 *   verified    true when the host verified a quorum in this observation
 *   leader      the leader (BigInt) most answering voters name; undefined
 *               when unverified or when no answer names one
 *   voters      the voters' IDs from etcd's member list (BigInt[]; [] when
 *               unverified or the list could not be read)
 *   agreeing    the answering voters that name `leader` (BigInt[])
 *   unverified  {kind: 'not-probed' | 'unreachable' | 'no-quorum', message}
 *               when nothing was verified, else undefined
 *
 * `tag` and `val` stay as the WIT has them. definePolicy hands evaluate the
 * observation with its quorum read this way; a finding already read is
 * returned as it is.
 */
export function readQuorum(finding) {
  if (finding != null && typeof finding.verified === 'boolean') return finding;
  if (finding?.tag === 'verified') {
    const q = finding.val;
    return {
      tag: finding.tag,
      val: q,
      verified: true,
      leader: q.leader ?? undefined,
      voters: Array.from(q.voters ?? []),
      agreeing: Array.from(q.agreeing ?? []),
      unverified: undefined,
    };
  }
  if (finding?.tag === 'unverified') {
    return {
      tag: finding.tag,
      val: finding.val,
      verified: false,
      leader: undefined,
      voters: [],
      agreeing: [],
      unverified: finding.val,
    };
  }
  throw new TypeError(
    `observation.quorum is not the host's finding (steward:status@0.2.0): ${String(finding?.tag ?? finding)}`,
  );
}

/**
 * The observation as evaluate receives it: the WIT record with `quorum`
 * read by readQuorum, and `tls` as the host sends it without spec.tls (all
 * false, no certificates) when it has none. For unit tests that call a
 * policy's own evaluate with an observation written in the WIT's shape.
 */
export function readObservation(observation) {
  return {
    ...observation,
    quorum: readQuorum(observation.quorum),
    tls: observation.tls ?? { client: false, clientCertAuth: false, peer: false, certificates: [] },
  };
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
 *
 * The Python SDK words every one of these errors the same way (the table
 * both SDKs' tests check: etcd-steward's policies/js/scripts/settings-errors.json):
 *   invalid settings: not JSON: <the parser's message>
 *   invalid settings: expected a JSON object, got an array
 *   invalid settings: unknown field "x"; known fields: a, b
 *   invalid settings: unknown field "x"; this policy takes no settings
 *   invalid settings: a must be an integer at least 0 and at most 9, got "2"
 * Unknown fields are reported first (by name), then the declared fields in
 * their order.
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
  const known = Object.keys(properties);
  for (const key of Object.keys(value).sort()) {
    if (!Object.hasOwn(properties, key)) {
      reject(
        `invalid settings: unknown field ${JSON.stringify(key)}` +
          (known.length ? `; known fields: ${known.join(', ')}` : '; this policy takes no settings'),
      );
    }
  }
  const settings = {};
  for (const [key, schema] of Object.entries(properties)) {
    if (!Object.hasOwn(value, key)) {
      settings[key] = schema.default;
      continue;
    }
    const v = value[key];
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
 *                       declineVerification?, requeueAfterMs?, events?}
 *                       observation.quorum is the host's finding, read by
 *                       readQuorum; declineVerification (a reason) declines
 *                       it, and left out accepts it.
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
        verdict = complete(evaluate(readObservation(observation), settings));
      } catch (e) {
        // With stdio disabled an uncaught exception would be a bare wasm
        // trap; the host would still fall back, but nobody would see the
        // JS error. This verdict claims nothing (it declines the host's
        // finding, as the host's own fallback does not verify) and carries
        // the error text.
        const message = `the policy's evaluate threw: ${errorText(e)}`;
        verdict = complete({
          conditions: [
            condition(AVAILABLE, null, 'PolicyError', message),
            condition(DEGRADED, null, 'PolicyError', message),
          ],
          declineVerification: clip(message),
          events: [warning('PolicyError', message)],
        });
      }
      if (problem) verdict.events.push(warning('InvalidSettings', `using default settings: ${problem}`));
      return verdict;
    },
  };
}

/**
 * Fills the verdict fields a policy may leave out: nothing ready, the host's
 * finding accepted, no requeue hint, no events. Throws (so the policy's error
 * becomes a PolicyError verdict) on a verdict in 0.1.0's shape, whose
 * `verified` would otherwise be dropped without a word.
 */
function complete(v) {
  if (Object.hasOwn(v, 'verified')) {
    throw new TypeError(
      "a verdict has no 'verified' since steward:status@0.2.0: verification is the host's " +
        "(observation.quorum); return declineVerification: 'a reason' to decline it",
    );
  }
  const decline = v.declineVerification ?? undefined;
  if (decline !== undefined && typeof decline !== 'string') {
    throw new TypeError(`declineVerification must be a string (the reason) or undefined, got ${kindOf(decline)}`);
  }
  return {
    conditions: v.conditions ?? [],
    readyMembers: v.readyMembers ?? 0,
    declineVerification: decline,
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
