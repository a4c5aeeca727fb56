"""voters-down: Available while etcd confirms a quorum and at most
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
| probed, etcd did not confirm a quorum   | False QuorumNotConfirmed  | True (see below)   |
| confirmed, voters down > maxVotersDown  | False VoterBudgetExceeded | True               |
|                                         |                           | VotersNotAnswering |
| confirmed, voters down <= maxVotersDown | True QuorumConfirmed      | see below          |

Degraded (probed): True VotersNotAnswering when any voter did not answer;
else True PodsNotReady when a member's Pod is not Ready; else True
QuorumNotConfirmed when Available is False; else False MembersHealthy.

etcd confirms a quorum when a quorum of voting members answered Status and
agree on one non-zero leader, or when a linearizable read succeeded.
readyMembers counts members that answered and whose Pod is Ready; verified
is True exactly when etcd confirmed a quorum. A Warning event
VoterBudgetExceeded is emitted whenever voters down exceed the budget.
"""

from __future__ import annotations

from typing import Any

import steward_policy as sp


class VotersDown(sp.StatusPolicy):
    name = "voters-down"
    version = "0.1.0"
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
        report = obs.probing.value

        errors = sp.failed(obs)
        budget = settings["maxVotersDown"]
        voters = sp.voting_members(obs)
        up = [v for v in voters if v.answered]
        down = [v for v in voters if not v.answered]
        needed = sp.quorum(len(voters))
        leader, agreeing = sp.leader_agreement(v.status for v in up)
        by_leader = bool(voters) and agreeing >= needed
        confirmed = by_leader or sp.quorum_read_succeeded(obs)

        counts = f"{len(up)} of {len(voters)} voting members answer (quorum {needed})"
        if by_leader:
            evidence = agreement(leader, agreeing)
        elif confirmed:
            evidence = "a linearizable read succeeded"
        else:
            evidence = (
                f"no quorum agrees on a leader ({agreement(leader, agreeing)}) and {read_outcome(report)}"
            )
        down_text = (
            f"not answering: {sp.name_list(why_down(v, errors) for v in down)}"
            if down
            else "all voters answer"
        )
        over = len(down) > budget
        budget_text = f"{len(down)} down, maxVotersDown {budget}"

        if not confirmed:
            avail = sp.available(False, "QuorumNotConfirmed", f"{counts}; {evidence}; {down_text}")
        elif over:
            avail = sp.available(False, "VoterBudgetExceeded", f"{budget_text}; {down_text}; {counts}")
        else:
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
        elif not confirmed:
            deg = sp.degraded(True, "QuorumNotConfirmed", avail.message)
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
        return sp.verdict(
            [avail, deg],
            ready_members=len(ready),
            verified=confirmed,
            events=events,
        )


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


def agreement(leader: int, agreeing: int) -> str:
    """How many answering voters name the leader most of them name."""
    if agreeing == 0:
        return "none knows a leader"
    if agreeing == 1:
        return f"1 names leader {sp.hex_id(leader)}"
    return f"{agreeing} agree on leader {sp.hex_id(leader)}"


def read_outcome(report: sp.ProbeReport) -> str:
    """Why the quorum read did not confirm a quorum."""
    match report.quorum_read:
        case sp.QuorumReadOutcome_Failed(error):
            return f"the quorum read failed ({error.kind.name.lower()})"
        case _:
            return "no quorum read was attempted"


Policy = sp.export(VotersDown)
