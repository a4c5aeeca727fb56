"""{{name}}: an etcd-steward status policy.

Available while the host verified a quorum (``obs.quorum``: a linearizable
read went through raft); Degraded while a voting member does not answer or a
Pod is not Ready. Change ``evaluate`` and the cases in tests/ together;
README.md says how to build and test.

Whether etcd has a quorum is the host's finding, ``obs.quorum``, the one
definition: say Available True only when ``obs.quorum.verified`` (the host
rejects it otherwise). A verdict may decline the finding for a reason of its
own (``sp.verdict(..., decline_verification="why")``), never claim more.
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
        counts = f"{len(up)} of {len(voters)} voting members answer (quorum {sp.quorum(len(voters))})"
        # The host's finding, taken as it is: the one definition of a verified quorum.
        unverified = obs.quorum.unverified
        if unverified is None:
            available = sp.available(True, "QuorumConfirmed", f"{counts}; a linearizable read went through")
        elif unverified.kind == sp.UnverifiedKind.UNREACHABLE:
            available = sp.available(False, "ClusterUnreachable", f"{counts}; {unverified.message}")
        else:
            available = sp.available(False, "QuorumNotConfirmed", f"{counts}; {unverified.message}")

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
        return sp.verdict([available, degraded], ready_members=ready)


# componentize-py calls the module-level class named Policy.
Policy = sp.export(ThisPolicy)
