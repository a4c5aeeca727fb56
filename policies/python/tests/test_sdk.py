"""Unit tests of steward_policy for what YAML cases cannot reach: how the
host's finding reaches ``evaluate``, how a verdict declines it, the safety
nets of the export, and the wording of settings errors (one table with the
JavaScript SDK). Run by ``./test.sh``, natively, against the bindings
componentize-py generates; no component is built.
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path
from typing import Any

import steward_policy as sp
from componentize_py_types import Err

# The JavaScript SDK's tests check the same table (scripts/sdk.test.mjs).
TABLE = Path(__file__).resolve().parents[2] / "js" / "scripts" / "settings-errors.json"


# What the host sends for a cluster without spec.tls.
NO_TLS = sp.TlsFacts(False, False, False, [])


def observation(
    quorum: sp.QuorumFinding,
    settings: str = "{}",
    backup: sp.BackupFacts | None = None,
    tls: sp.TlsFacts = NO_TLS,
) -> sp.WitObservation:
    """A WIT observation of one answering member, with the given finding."""
    member = sp.Member("etcd-a", sp.MemberRole.VOTER, 0xA1, "https://etcd-a:2379", sp.PodPhase.RUNNING,
                       True, None, 0, None, False)
    status = sp.EndpointStatus(0xA1, 0xA1, 2, 900, 900, 4711, 0, 0, "3.5.17", [], False)
    report = sp.ProbeReport(
        [sp.EndpointProbe("etcd-a", "https://etcd-a:2379", sp.ProbeOutcome_Answered(status))],
        sp.MemberListOutcome_Listed([sp.EtcdMember(0xA1, "etcd-a", [], [], False)]),
        sp.QuorumReadOutcome_Succeeded(),
    )
    return sp.WitObservation(
        sp.ClusterRef("ns", "c", "uid", 1),
        sp.ClusterSpec(1, "3.5.17", None),
        sp.HostPhase.STEADY,
        [member],
        sp.Probing_Attempted(report),
        quorum,
        sp.History(None, 0, []),
        backup,
        tls,
        1796169600000,
        settings,
    )


VERIFIED = sp.QuorumFinding_Verified(sp.VerifiedQuorum(0xA1, [0xA1, 0xB2, 0xC3], [0xA1, 0xB2]))
NO_QUORUM = sp.QuorumFinding_Unverified(
    sp.UnverifiedQuorum(sp.UnverifiedKind.NO_QUORUM, "1 of 3 endpoints answered, but a linearizable read failed")
)


def policy_returning(make: Any) -> Any:
    """The export of a policy whose evaluate returns make(obs)."""
    return sp.define("p", lambda obs, settings: make(obs))()


class TheFinding(unittest.TestCase):
    def test_a_verified_finding_reads_as_verified_with_its_parts(self) -> None:
        q = sp.Quorum(VERIFIED)
        self.assertTrue(q.verified)
        self.assertEqual((q.leader, q.voters, q.agreeing, q.unverified), (0xA1, [0xA1, 0xB2, 0xC3], [0xA1, 0xB2], None))
        match q.finding:
            case sp.QuorumFinding_Verified(v):
                self.assertEqual(v.leader, 0xA1)
            case _:
                self.fail("the WIT variant is at hand for match")

    def test_a_verified_finding_may_name_no_leader(self) -> None:
        q = sp.Quorum(sp.QuorumFinding_Verified(sp.VerifiedQuorum(None, [], [])))
        self.assertEqual((q.verified, q.leader, q.voters, q.agreeing), (True, None, [], []))

    def test_an_unverified_finding_says_why(self) -> None:
        q = sp.Quorum(NO_QUORUM)
        self.assertFalse(q.verified)
        self.assertEqual((q.leader, q.voters, q.agreeing), (None, [], []))
        assert q.unverified is not None
        self.assertEqual(q.unverified.kind, sp.UnverifiedKind.NO_QUORUM)
        self.assertIn("linearizable read failed", q.unverified.message)

    def test_evaluate_receives_the_observation_with_the_finding_read(self) -> None:
        seen: list[sp.Observation] = []

        def evaluate(obs: sp.Observation) -> sp.Verdict:
            seen.append(obs)
            return sp.verdict([sp.available(obs.quorum.verified, "R"), sp.degraded(False, "R")])

        v = policy_returning(evaluate).evaluate(observation(VERIFIED))
        self.assertIsInstance(seen[0], sp.Observation)
        self.assertEqual(seen[0].quorum, sp.Quorum(VERIFIED))
        self.assertEqual(seen[0].members[0].name, "etcd-a")
        self.assertEqual(v.conditions[0].status, sp.ConditionStatus.TRUE)
        # An observation already read is passed on as it is.
        obs = sp.Observation.from_wit(observation(NO_QUORUM))
        policy_returning(evaluate).evaluate(obs)
        self.assertIs(seen[1], obs)


class TheBackup(unittest.TestCase):
    def test_evaluate_receives_the_backup_facts_or_none(self) -> None:
        seen: list[sp.Observation] = []

        def evaluate(obs: sp.Observation) -> sp.Verdict:
            seen.append(obs)
            return sp.verdict([sp.available(obs.quorum.verified, "R"), sp.degraded(False, "R")])

        facts = sp.BackupFacts("nightly", 1790000000000, 86400000, 1795993200000)
        policy_returning(evaluate).evaluate(observation(VERIFIED, backup=facts))
        policy_returning(evaluate).evaluate(observation(VERIFIED))
        assert seen[0].backup is not None
        self.assertEqual(
            (seen[0].backup.schedule, seen[0].backup.schedule_created, seen[0].backup.interval_ms,
             seen[0].backup.last_success),
            ("nightly", 1790000000000, 86400000, 1795993200000),
        )
        self.assertIsNone(seen[1].backup)


class TheTls(unittest.TestCase):
    def test_evaluate_receives_the_tls_facts_all_false_without_spec_tls(self) -> None:
        seen: list[sp.Observation] = []

        def evaluate(obs: sp.Observation) -> sp.Verdict:
            seen.append(obs)
            return sp.verdict([sp.available(obs.quorum.verified, "R"), sp.degraded(False, "R")])

        facts = sp.TlsFacts(
            True,
            True,
            True,
            [
                sp.CertificateFacts(sp.CertificateRole.SERVING, "etcd-server-tls", 1790000000000, 1797000000000),
                sp.CertificateFacts(sp.CertificateRole.PEER, "etcd-peer-tls", 1790000000000, 1798000000000),
                sp.CertificateFacts(
                    sp.CertificateRole.OPERATOR_CLIENT, "etcd-operator-client-tls", 1790000000000, 1796256000000
                ),
            ],
        )
        policy_returning(evaluate).evaluate(observation(VERIFIED, tls=facts))
        policy_returning(evaluate).evaluate(observation(VERIFIED))
        tls = seen[0].tls
        self.assertEqual((tls.client, tls.client_cert_auth, tls.peer), (True, True, True))
        self.assertEqual(
            [(c.role, c.secret, c.not_before, c.not_after) for c in tls.certificates],
            [
                (sp.CertificateRole.SERVING, "etcd-server-tls", 1790000000000, 1797000000000),
                (sp.CertificateRole.PEER, "etcd-peer-tls", 1790000000000, 1798000000000),
                (sp.CertificateRole.OPERATOR_CLIENT, "etcd-operator-client-tls", 1790000000000, 1796256000000),
            ],
        )
        # The soonest expiry is the policy's to find, against obs.now.
        soonest = min(tls.certificates, key=lambda c: c.not_after)
        self.assertEqual(
            (soonest.role, soonest.not_after - seen[0].now), (sp.CertificateRole.OPERATOR_CLIENT, 86400000)
        )
        none = seen[1].tls
        self.assertEqual((none.client, none.client_cert_auth, none.peer, none.certificates), (False, False, False, []))


class TheAnswers(unittest.TestCase):
    def test_an_answer_carries_the_members_own_revision(self) -> None:
        seen: list[sp.Observation] = []

        def evaluate(obs: sp.Observation) -> sp.Verdict:
            seen.append(obs)
            return sp.verdict([sp.available(obs.quorum.verified, "R"), sp.degraded(False, "R")])

        policy_returning(evaluate).evaluate(observation(VERIFIED))
        status = sp.answered(seen[0])["etcd-a"]
        self.assertEqual((status.raft_applied_index, status.revision), (900, 4711))


class TheVerdict(unittest.TestCase):
    def test_by_default_a_verdict_accepts_the_finding(self) -> None:
        v = sp.verdict([sp.available(True, "R"), sp.degraded(False, "R")])
        self.assertEqual((v.ready_members, v.decline_verification, v.requeue_after_ms, v.events), (0, None, None, []))

    def test_a_verdict_declines_with_a_reason(self) -> None:
        v = policy_returning(
            lambda obs: sp.verdict(
                [sp.available(False, "R"), sp.degraded(True, "R")],
                decline_verification="2 voters, spec.replicas 3",
            )
        ).evaluate(observation(VERIFIED))
        self.assertEqual(v.decline_verification, "2 voters, spec.replicas 3")

    def test_an_exception_is_an_unknown_verdict_that_declines(self) -> None:
        v = policy_returning(lambda obs: 1 // 0).evaluate(observation(VERIFIED))
        self.assertEqual([(c.status, c.reason) for c in v.conditions], [(sp.ConditionStatus.UNKNOWN, "PolicyError")] * 2)
        assert v.decline_verification is not None
        self.assertTrue(v.decline_verification.startswith("the policy's evaluate raised ZeroDivisionError"))

    def test_a_verdict_in_0_1_0_shape_is_the_policy_s_error(self) -> None:
        conditions = [sp.available(True, "R"), sp.degraded(False, "R")]
        v = policy_returning(lambda obs: sp.Verdict(conditions, 1, True, None, [])).evaluate(  # type: ignore[arg-type]
            observation(VERIFIED)
        )
        self.assertEqual(v.conditions[0].reason, "PolicyError")
        self.assertIn("decline_verification must be a str (the reason) or None, got bool", v.conditions[0].message)
        v = policy_returning(lambda obs: sp.verdict(conditions, verified=True)).evaluate(  # type: ignore[call-arg]
            observation(VERIFIED)
        )
        self.assertIn("unexpected keyword argument 'verified'", v.conditions[0].message)

    def test_none_of_the_sdk_s_own_quorum_derivations_remain(self) -> None:
        for gone in ("leader_agreement", "quorum_read_succeeded"):
            self.assertFalse(hasattr(sp, gone), gone)


class SettingsErrors(unittest.TestCase):
    def test_worded_as_the_table_both_sdks_check_says(self) -> None:
        table = json.loads(TABLE.read_text(encoding="utf-8"))
        kinds = {"integer": int, "number": float, "boolean": bool, "string": str}
        n = 0
        for group in table["groups"]:
            fields = []
            for name, schema in group["fields"].items():
                setting = sp.Setting(name, schema["default"], minimum=schema.get("minimum"), maximum=schema.get("maximum"))
                self.assertIs(setting.kind, kinds[schema["type"]], name)
                fields.append(setting)
            settings = sp.Settings(*fields)
            for case in group["cases"]:
                n += 1
                with self.subTest(settings=case["settings"]):
                    try:
                        got, error = settings.parse(case["settings"]), None
                    except sp.SettingsError as e:
                        got, error = None, str(e)
                    if "accepted" in case:
                        self.assertEqual(got, case["accepted"])
                    elif "errorStartsWith" in case:
                        self.assertIsNotNone(error)
                        self.assertTrue(str(error).startswith(case["errorStartsWith"]), error)
                    else:
                        self.assertEqual(error, case["error"])
        self.assertGreater(n, 20)

    def test_validate_settings_refuses_with_the_message(self) -> None:
        exported = sp.define("p", lambda obs, s: sp.verdict([]), settings=sp.Settings(sp.Setting("n", 1, minimum=0)))()
        exported.validate_settings("{}")
        with self.assertRaises(Err) as refused:
            exported.validate_settings('{"n": -1}')
        self.assertEqual(refused.exception.value, "invalid settings: n must be an integer at least 0, got -1")


if __name__ == "__main__":
    unittest.main()
