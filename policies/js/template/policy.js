// {{name}}: an etcd-steward status policy. The host calls evaluate on every
// reconcile with one observation of an EtcdCluster; the verdict sets its
// Available and Degraded conditions. Edit freely, keep it pure: there is no
// clock (use observation.now), no I/O and no console.
//
// Whether etcd has a quorum is the host's finding, observation.quorum (a
// linearizable read went through raft): Available is True only when it is
// verified, or the host rejects the verdict. A verdict may decline the
// finding for a reason of its own (declineVerification: 'why'), never claim
// more than it.
import { AVAILABLE, DEGRADED, condition, definePolicy, hex, probeReport, quorum, votingMembers } from './sdk/policy.js';

export const policy = definePolicy({
  name: '{{name}}',
  version: '0.1.0',
  settings: {
    unverifiedRequeueSeconds: {
      type: 'integer',
      minimum: 0,
      maximum: 3600,
      default: 5,
      description: 'Ask the host to look again this soon while etcd has not verified the cluster; 0 for its default.',
    },
  },
  evaluate(obs, settings) {
    if (obs.phase === 'paused' || obs.spec.desiredReplicas === 0) {
      const message = 'spec.replicas is 0';
      return { conditions: [condition(AVAILABLE, false, 'Paused', message), condition(DEGRADED, false, 'Paused', message)] };
    }
    if (!probeReport(obs)) {
      const message = `not probed: ${obs.probing.val}`;
      return { conditions: [condition(AVAILABLE, null, 'NotProbed', message), condition(DEGRADED, null, 'NotProbed', message)] };
    }

    const voters = votingMembers(obs);
    const silent = voters.filter((v) => !v.status);
    const summary = `${voters.length - silent.length} of ${voters.length} voting members answered`;
    const q = obs.quorum;
    let available;
    if (q.verified) {
      const leader = q.leader === undefined ? 'no answer names a leader' : `${q.agreeing.length} agree on leader ${hex(q.leader)}`;
      available = condition(AVAILABLE, true, 'QuorumHealthy', `${summary}; a linearizable read went through; ${leader}`);
    } else if (q.unverified.kind === 'unreachable') {
      available = condition(AVAILABLE, false, 'ClusterUnreachable', q.unverified.message);
    } else {
      available = condition(AVAILABLE, false, 'QuorumNotConfirmed', `${summary}, quorum needs ${quorum(voters.length)}: ${q.unverified.message}`);
    }
    return {
      conditions: [
        available,
        silent.length
          ? condition(DEGRADED, true, 'VotersDown', `not answering: ${silent.map((v) => v.name).join(', ')}`)
          : condition(DEGRADED, false, 'AllVotersAnswer', summary),
      ],
      readyMembers: obs.members.filter((m) => m.podReady && voters.some((v) => v.name === m.name && v.status)).length,
      // Until the host verifies the cluster, look again sooner than its default.
      requeueAfterMs: !q.verified && settings.unverifiedRequeueSeconds > 0 ? settings.unverifiedRequeueSeconds * 1000 : undefined,
    };
  },
});
