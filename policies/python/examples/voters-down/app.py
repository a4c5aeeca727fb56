"""voters-down: Available while the host verified a quorum and at most
``maxVotersDown`` voting members are not answering.

The default policy asks only "does etcd have a quorum?". This one also
holds the cluster to a fault budget: a 5-member cluster with two voters
down still has quorum, but one more failure loses it, and an operator who
set ``maxVotersDown: 1`` wants that shown as not Available (and a Warning
event) before it happens.

| observation                             | Available                 | Degraded           |
|-----------------------------------------|---------------------------|--------------------|
| phase Paused or spec.replicas 0         | False Paused              | False Paused       |
| not probed at all (probing skipped)     | Unknown NotProbed         | True PodsNotReady, |
|                                         |                           | else Unknown       |
|                                         |                           | NotProbed          |
| probed, no endpoint answered            | False ClusterUnreachable  | True (see below)   |
| probed, no quorum verified              | False QuorumNotConfirmed  | True (see below)   |
| verified, voters down > maxVotersDown   | False VoterBudgetExceeded | True               |
|                                         |                           | VotersNotAnswering |
| verified, voters down <= maxVotersDown  | True QuorumConfirmed      | see below          |

Degraded (probed): True VotersNotAnswering when any voter did not answer;
else True PodsNotReady when a member's Pod is not Ready; else True with
Available's reason when Available is False; else False MembersHealthy.

Whether a quorum exists is the host's finding, ``obs.quorum``, taken as it
is: verified when a linearizable read went through raft (its leader is the
one the most answering voters name). "Not probed", "no endpoint answered"
and "no quorum verified" are its three unverified kinds. The policy never
declines the finding, so the status shows the cluster verified exactly when
the host verified a quorum, whatever the budget says. readyMembers counts
members that answered and whose Pod is Ready. A Warning event
VoterBudgetExceeded is emitted whenever voters down exceed the budget.
"""

from __future__ import annotations

from typing import Any

import steward_policy as sp


class VotersDown(sp.StatusPolicy):
    name = "voters-down"
    version = "0.2.0"
    settings = sp.Settings(
        sp.Setting(
            "maxVotersDown",
            1,
            minimum=0,
            description="Voting members that may be not answering while the cluster "
            "is still Available; more makes Available False (VoterBudgetExceeded).",
        ),
    )

    def evaluate(self, obs: sp.Observation, settings: dict[str, Any]) -> sp.Verdict:
        answers = sp.answered(obs)
        ready = [m.name for m in obs.members if m.name in answers and m.pod_ready]
        not_ready = [m.name for m in obs.members if not m.pod_ready]

        if sp.is_paused(obs):
            why = (
                "spec.replicas is 0: the cluster is intentionally dormant"
                if obs.spec.desired_replicas == 0
                else "phase Paused: the cluster is intentionally dormant"
            )
            return sp.verdict(
                [sp.available(False, "Paused", why), sp.degraded(False, "Paused", why)],
                ready_members=len(ready),
            )

        if isinstance(obs.probing, sp.Probing_Skipped):
            return not_probed(obs.probing.value, not_ready)

        # Whether etcd has a quorum is the host's finding: taken as it is.
        finding = obs.quorum
        errors = sp.failed(obs)
        budget = settings["maxVotersDown"]
        voters = sp.voting_members(obs)
        up = [v for v in voters if v.answered]
        down = [v for v in voters if not v.answered]
        needed = sp.quorum(len(voters))

        counts = f"{len(up)} of {len(voters)} voting members answer (quorum {needed})"
        down_text = (
            f"not answering: {sp.name_list(why_down(v, errors) for v in down)}"
            if down
            else "all voters answer"
        )
        over = len(down) > budget
        budget_text = f"{len(down)} down, maxVotersDown {budget}"

        unverified = finding.unverified
        if unverified is not None:
            reason = (
                "ClusterUnreachable"
                if unverified.kind == sp.UnverifiedKind.UNREACHABLE
                else "QuorumNotConfirmed"
            )
            avail = sp.available(False, reason, f"{counts}; {unverified.message}; {down_text}")
        elif over:
            avail = sp.available(False, "VoterBudgetExceeded", f"{budget_text}; {down_text}; {counts}")
        else:
            agree = agreement(finding.leader, len(finding.agreeing))
            evidence = f"a linearizable read went through; {agree}"
            avail = sp.available(True, "QuorumConfirmed", f"{counts}; {evidence}; {budget_text}")

        if down:
            parts = [down_text]
            if not_ready:
                parts.append(f"pods not Ready: {sp.name_list(not_ready)}")
            deg = sp.degraded(
                True, "VotersNotAnswering", f"{len(down)} of {len(voters)} voting members {'; '.join(parts)}"
            )
        elif not_ready:
            deg = sp.degraded(
                True,
                "PodsNotReady",
                f"{len(not_ready)} of {len(obs.members)} pods not Ready: {sp.name_list(not_ready)}",
            )
        elif not finding.verified:
            deg = sp.degraded(True, avail.reason, avail.message)
        else:
            deg = sp.degraded(
                False,
                "MembersHealthy",
                "every voting member answers and every pod is Ready "
                f"({len(voters)} voters, {len(obs.members)} members)",
            )

        events = []
        if over:
            events.append(
                sp.warning(
                    "VoterBudgetExceeded",
                    f"{len(down)} of {len(voters)} voting members not answering, "
                    f"more than maxVotersDown {budget}: {sp.name_list(v.name for v in down)}",
                )
            )
        # No decline_verification: the host's finding stands; the budget
        # decides Available, not whether etcd proved a quorum.
        return sp.verdict([avail, deg], ready_members=len(ready), events=events)


def not_probed(reason: str, not_ready: list[str]) -> sp.Verdict:
    """The host could not probe: no evidence about etcd either way, so
    Available is Unknown; pod readiness is still a fact worth reporting."""
    why = f"not probed: {reason}"
    if not_ready:
        deg = sp.degraded(True, "PodsNotReady", f"pods not Ready: {sp.name_list(not_ready)}; {why}")
    else:
        deg = sp.degraded(None, "NotProbed", why)
    return sp.verdict([sp.available(None, "NotProbed", why), deg])


def why_down(voter: sp.Voter, errors: dict[str, sp.ProbeError]) -> str:
    """The voter and why it did not answer: "etcd-c (refused)"."""
    error = errors.get(voter.name)
    if error is not None:
        return f"{voter.name} ({error.kind.name.lower()})"
    if voter.member is None:
        return f"{voter.name} (no EtcdMember)"
    return f"{voter.name} (not probed)"


def agreement(leader: int | None, agreeing: int) -> str:
    """How many answering voters name the leader the host found."""
    if leader is None:
        return "no answer names a leader"
    if agreeing == 1:
        return f"1 names leader {sp.hex_id(leader)}"
    return f"{agreeing} agree on leader {sp.hex_id(leader)}"


Policy = sp.export(VotersDown)
