// db-headroom: a status policy that watches how close etcd's databases are to
// their backend quota, on top of quorum. Whether etcd has a quorum is the
// host's finding (observation.quorum), taken as it is. README.md beside this
// file has the decision table; tests/*.yaml has a case for every row.
import {
  AVAILABLE,
  DEGRADED,
  answered,
  condition,
  definePolicy,
  hex,
  probeReport,
  quorum,
  quotaBytes,
  votingMembers,
  warning,
} from '../../sdk/policy.js';

const STORAGE = 'StorageHealthy';

export const policy = definePolicy({
  name: 'db-headroom',
  version: '0.2.0',
  conditionTypes: [AVAILABLE, DEGRADED, STORAGE],
  settings: {
    warnRatio: {
      type: 'number',
      exclusiveMinimum: 0,
      maximum: 1,
      default: 0.8,
      description:
        "Share of the backend quota (spec quotaBackendBytes, else 2 GiB) above which a member's db makes the cluster Degraded.",
    },
    maxVotersDown: {
      type: 'integer',
      minimum: 0,
      default: 1,
      description: 'Voting members that may fail to answer while the cluster is still Available.',
    },
  },
  evaluate,
});

function evaluate(obs, settings) {
  const readyMembers = countReady(obs);

  if (obs.phase === 'paused' || obs.spec.desiredReplicas === 0) {
    const message = 'spec.replicas is 0: the cluster is intentionally dormant';
    return {
      conditions: [
        condition(AVAILABLE, false, 'Paused', message),
        condition(DEGRADED, false, 'Paused', message),
        condition(STORAGE, null, 'Paused', `${message}; storage is not measured`),
      ],
      readyMembers,
    };
  }

  const report = probeReport(obs);
  if (!report) {
    // Could not probe is no evidence either way: say so rather than guess.
    const message = `not probed: ${obs.probing.val}`;
    return {
      conditions: [
        condition(AVAILABLE, null, 'NotProbed', message),
        condition(DEGRADED, null, 'NotProbed', message),
        condition(STORAGE, null, 'NotProbed', message),
      ],
      readyMembers,
    };
  }

  const voters = votingMembers(obs);
  const silent = voters.filter((v) => !v.status);
  const storage = measure(obs, settings);
  const available = availability(obs, report, voters, silent, settings);
  const nospace = storage.measured.filter((m) => m.alarms.includes('nospace'));

  // No declineVerification: the host's finding stands. A stricter Available
  // (maxVotersDown) says what this policy concludes, not what etcd proved.
  return {
    conditions: [available, degraded(obs, voters, silent, storage, available), storageCondition(storage)],
    readyMembers,
    events: nospace.length
      ? [
          warning(
            'NospaceAlarm',
            `${names(nospace)} raised NOSPACE: etcd refuses writes until the db is compacted, ` +
              'defragmented and the alarm disarmed',
          ),
        ]
      : [],
  };
}

/**
 * Available: the host verified a quorum (observation.quorum), and no more
 * than maxVotersDown voters are silent. Never True without the host's
 * verification: the host would reject the verdict.
 */
function availability(obs, report, voters, silent, settings) {
  const q = obs.quorum;
  const answering = voters.filter((v) => v.status && !v.status.isLearner);
  let message = `${answering.length} of ${voters.length} voting members answered`;

  if (q.verified) {
    message +=
      q.leader === undefined
        ? '; a linearizable read went through; no answer names a leader'
        : `; a linearizable read went through; ${q.agreeing.length} agree on leader ${hex(q.leader)}`;
    if (silent.length <= settings.maxVotersDown) {
      return condition(AVAILABLE, true, 'QuorumHealthy', message);
    }
    return condition(
      AVAILABLE,
      false,
      'TooManyVotersDown',
      `${message}, but ${silent.length} do not (${names(silent)}); maxVotersDown is ${settings.maxVotersDown}`,
    );
  }
  if (q.unverified.kind === 'unreachable') {
    const failures = report.endpoints.map((p) =>
      p.outcome.tag === 'failed' ? `${p.member} (${p.outcome.val.kind}: ${p.outcome.val.message})` : p.member,
    );
    return condition(
      AVAILABLE,
      false,
      'ClusterUnreachable',
      failures.length ? `no endpoint answered: ${failures.join(', ')}` : 'no endpoint was probed',
    );
  }
  return condition(
    AVAILABLE,
    false,
    'QuorumLost',
    `${message}, quorum needs ${quorum(voters.length)}; ${q.unverified.message}`,
  );
}

/** Each answering member's db size against the quota, and its alarms. */
function measure(obs, settings) {
  const quota = quotaBytes(obs);
  const measured = answered(obs).map(({ member, status }) => ({
    name: member,
    bytes: Number(status.dbSize),
    ratio: Number(status.dbSize) / quota,
    alarms: status.alarms,
  }));
  return {
    quota,
    warnRatio: settings.warnRatio,
    measured,
    full: measured.filter((m) => m.ratio > settings.warnRatio),
    alarmed: measured.filter((m) => m.alarms.length > 0),
    unmeasured: obs.members.length - measured.length,
  };
}

/** Degraded: an alarm, a db above warnRatio, or a silent voter; the message names each. */
function degraded(obs, voters, silent, storage, available) {
  // member -> its problems; seeded in the observation's member order so the
  // message lists members the way `kubectl get etcdmembers` does.
  const problems = new Map(obs.members.map((m) => [m.name, []]));
  const add = (name, problem) => problems.set(name, [...(problems.get(name) ?? []), problem]);
  for (const m of storage.alarmed) for (const a of m.alarms) add(m.name, `alarm ${a.toUpperCase()}`);
  for (const m of storage.full) add(m.name, `db ${usage(m, storage.quota)}, above ${pct(storage.warnRatio)}`);
  for (const v of silent) add(v.name, v.error ? `not answering (${v.error.kind})` : 'not probed');

  const listed = [...problems].filter(([, p]) => p.length > 0);
  if (listed.length > 0) {
    // The reason names the worst kind of problem; the message lists them all.
    const reason = storage.alarmed.length ? 'AlarmRaised' : silent.length ? 'VotersDown' : 'NearQuota';
    const message = listed.map(([name, p]) => `${name}: ${p.join(', ')}`).join('; ');
    return condition(DEGRADED, true, reason, message);
  }
  if (available.status === 'false') {
    // No member shows a problem, yet the host verified no quorum: that is
    // degraded too, for the reason Available gives.
    return condition(DEGRADED, true, available.reason, available.message);
  }
  const largest = storage.measured.reduce((a, m) => (a && a.bytes >= m.bytes ? a : m), undefined);
  return condition(
    DEGRADED,
    false,
    'WithinLimits',
    `all ${voters.length} voting members answer` +
      (largest ? `; the largest db is ${largest.name} at ${usage(largest, storage.quota)}` : ''),
  );
}

function storageCondition(storage) {
  if (storage.alarmed.length) {
    const list = storage.alarmed.map((m) => `${m.name}: ${m.alarms.map((a) => a.toUpperCase()).join(', ')}`);
    return condition(STORAGE, false, 'AlarmRaised', `alarm raised on ${list.join('; ')}`);
  }
  if (storage.full.length) {
    const list = storage.full.map((m) => `${m.name}: ${usage(m, storage.quota)}`);
    return condition(STORAGE, false, 'NearQuota', `above ${pct(storage.warnRatio)} of the quota: ${list.join('; ')}`);
  }
  if (storage.measured.length === 0) {
    return condition(STORAGE, null, 'NotMeasured', 'no member answered Status, so no db size is known');
  }
  const largest = storage.measured.reduce((a, m) => (a.bytes >= m.bytes ? a : m));
  return condition(
    STORAGE,
    true,
    'WithinQuota',
    `every db is at most ${pct(storage.warnRatio)} of the quota; the largest is ${largest.name} at ` +
      usage(largest, storage.quota) +
      (storage.unmeasured > 0 ? `; ${storage.unmeasured} member(s) not measured` : ''),
  );
}

/** Members verified by this observation: the pod is Ready and etcd answered. */
function countReady(obs) {
  const answering = new Set(answered(obs).map((a) => a.member));
  return obs.members.filter((m) => m.podReady && answering.has(m.name)).length;
}

function names(list) {
  return list.map((m) => m.name).join(', ');
}

/** "85.3% of the 2 GiB quota (1.7 GiB)" */
function usage(m, quota) {
  return `${pct(m.ratio)} of the ${size(quota)} quota (${size(m.bytes)})`;
}

function pct(ratio) {
  return `${Math.round(ratio * 1000) / 10}%`;
}

function size(bytes) {
  const gib = 1024 ** 3;
  return bytes >= gib
    ? `${Math.round((bytes / gib) * 10) / 10} GiB`
    : `${Math.round((bytes / 1024 ** 2) * 10) / 10} MiB`;
}
