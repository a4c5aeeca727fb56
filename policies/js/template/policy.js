// {{name}}: an etcd-steward status policy. The host calls evaluate on every
// reconcile with one observation of an EtcdCluster; the verdict sets its
// Available and Degraded conditions. Edit freely, keep it pure: there is no
// clock (use observation.now), no I/O and no console.
import {
  AVAILABLE,
  DEGRADED,
  condition,
  definePolicy,
  hex,
  probeReport,
  quorum,
  quorumConfirmed,
  votingMembers,
} from './sdk/policy.js';

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
    const report = probeReport(obs);
    if (obs.phase === 'paused' || obs.spec.desiredReplicas === 0) {
      const message = 'spec.replicas is 0';
      return { conditions: [condition(AVAILABLE, false, 'Paused', message), condition(DEGRADED, false, 'Paused', message)] };
    }
    if (!report) {
      const message = `not probed: ${obs.probing.val}`;
      return { conditions: [condition(AVAILABLE, null, 'NotProbed', message), condition(DEGRADED, null, 'NotProbed', message)] };
    }

    const voters = votingMembers(obs);
    const silent = voters.filter((v) => !v.status);
    const etcd = quorumConfirmed(obs);
    const summary = `${voters.length - silent.length} of ${voters.length} voting members answered`;
    return {
      conditions: [
        etcd.confirmed
          ? condition(AVAILABLE, true, 'QuorumHealthy', `${summary}; ${etcd.agreeing} agree on leader ${hex(etcd.leader)}`)
          : condition(AVAILABLE, false, 'QuorumNotConfirmed', `${summary}, quorum needs ${quorum(voters.length)}: ${etcd.why}`),
        silent.length
          ? condition(DEGRADED, true, 'VotersDown', `not answering: ${silent.map((v) => v.name).join(', ')}`)
          : condition(DEGRADED, false, 'AllVotersAnswer', summary),
      ],
      readyMembers: obs.members.filter((m) => m.podReady && voters.some((v) => v.name === m.name && v.status)).length,
      verified: etcd.confirmed,
      // Until etcd confirms the cluster, look again sooner than the host's default.
      requeueAfterMs:
        !etcd.confirmed && settings.unverifiedRequeueSeconds > 0 ? settings.unverifiedRequeueSeconds * 1000 : undefined,
    };
  },
});
