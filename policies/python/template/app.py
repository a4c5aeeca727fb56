"""{{name}}: an etcd-steward status policy.

Available while etcd confirms a quorum (a quorum of voting members agree on
one leader, or a linearizable read succeeded); Degraded while a voting
member does not answer or a Pod is not Ready. Change ``evaluate`` and the
cases in tests/ together; README.md says how to build and test.
"""

from __future__ import annotations

from typing import Any

import steward_policy as sp


class ThisPolicy(sp.StatusPolicy):
    name = "{{name}}"
    version = "0.1.0"
    # No settings yet: any field is refused. Declare some with
    # sp.Settings(sp.Setting("maxVotersDown", 1, minimum=0)) and read them
    # from the `settings` dict evaluate() receives.
    settings = sp.Settings()

    def evaluate(self, obs: sp.Observation, settings: dict[str, Any]) -> sp.Verdict:
        if sp.is_paused(obs):
            why = "the cluster is intentionally dormant"
            return sp.verdict([sp.available(False, "Paused", why), sp.degraded(False, "Paused", why)])
        if sp.probe_report(obs) is None:
            # Could not probe: no evidence either way, so say Unknown.
            why = f"not probed: {obs.probing.value}"
            return sp.verdict([sp.available(None, "NotProbed", why), sp.degraded(None, "NotProbed", why)])

        voters = sp.voting_members(obs)
        up = [v for v in voters if v.answered]
        needed = sp.quorum(len(voters))
        _, agreeing = sp.leader_agreement(v.status for v in up)
        confirmed = (len(voters) > 0 and agreeing >= needed) or sp.quorum_read_succeeded(obs)
        counts = f"{len(up)} of {len(voters)} voting members answer (quorum {needed})"
        if confirmed:
            available = sp.available(True, "QuorumConfirmed", counts)
        else:
            available = sp.available(False, "QuorumNotConfirmed", counts)

        down = [v.name for v in voters if not v.answered]
        not_ready = [m.name for m in obs.members if not m.pod_ready]
        if down or not_ready:
            degraded = sp.degraded(
                True,
                "MembersUnhealthy",
                f"not answering: {sp.name_list(down)}; pods not Ready: {sp.name_list(not_ready)}",
            )
        else:
            degraded = sp.degraded(False, "MembersHealthy", counts)

        answers = sp.answered(obs)
        ready = sum(1 for m in obs.members if m.pod_ready and m.name in answers)
        return sp.verdict([available, degraded], ready_members=ready, verified=confirmed)


# componentize-py calls the module-level class named Policy.
Policy = sp.export(ThisPolicy)
