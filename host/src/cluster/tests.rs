//! The stages on a test [`Context`] (no watchers, no apiserver): the
//! incident's shape, where etcd cannot be reached at all, through observe,
//! evaluate with the real default policy, and the status it implies.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::watcher::Event;
use steward_policy_sdk as sdk;

use super::{evaluate, observe, plan, report, status};
use crate::api::{EtcdCluster, EtcdClusterStatus, MemberRole, MemberSummary};
use crate::context::{Context, OperatorConfig};
use crate::etcd::{ClientConfig, EtcdClient};
use crate::policy::{EngineConfig, PolicyEngine};
use crate::resources::fixtures;

fn context() -> (Arc<Context>, crate::watch::Writers) {
    // Nothing listens here: the stages under test never call the API.
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
        .expect("a client");
    let etcd = Arc::new(EtcdClient::new(ClientConfig {
        deadline: Duration::from_millis(300),
        ..ClientConfig::default()
    }));
    let engine = PolicyEngine::new(EngineConfig::default()).expect("the default policy loads");
    Context::for_tests(
        client,
        etcd,
        engine,
        OperatorConfig {
            probe_deadline: Duration::from_millis(300),
            ..OperatorConfig::default()
        },
    )
}

/// A cluster that was healthy with three members, whose names no longer
/// resolve (`*.main.prod.svc` does not exist here): the seed incident.
fn stale_healthy_cluster() -> EtcdCluster {
    let mut c = fixtures::cluster(fixtures::spec());
    c.status = Some(EtcdClusterStatus {
        ready_members: 3,
        cluster_id: Some("abc".into()),
        members: ["main-a", "main-b", "main-c"]
            .iter()
            .enumerate()
            .map(|(i, n)| MemberSummary {
                last_defrag: None,
                name: (*n).into(),
                id: Some(format!("{:x}", i + 1)),
                role: MemberRole::Voter,
                version: Some("3.5.1".into()),
                leader: i == 0,
                healthy: true,
            })
            .collect(),
        ..Default::default()
    });
    c
}

#[tokio::test]
async fn unreachable_etcd_is_observed_evaluated_and_written_as_unavailable() {
    let (ctx, mut writers) = context();
    for name in ["main-a", "main-b", "main-c"] {
        writers
            .members
            .apply_watcher_event(&Event::Apply(fixtures::member(name, name == "main-a")));
    }
    let cluster = Arc::new(stale_healthy_cluster());

    let observed = observe::observe(&cluster, &ctx).await;
    assert_eq!(observed.members.len(), 3);
    let sdk::Probing::Attempted(report) = &observed.observation.probing else {
        panic!("etcd was probed");
    };
    assert!(
        report
            .endpoints
            .iter()
            .all(|p| matches!(p.outcome, sdk::ProbeOutcome::Failed(_))),
        "{report:?}"
    );

    let evaluated = evaluate::evaluate(observed, &ctx).await;
    assert!(evaluated.problem.is_none(), "{:?}", evaluated.problem);
    assert!(evaluated.quorum.is_err());
    assert!(!evaluated.verified);
    assert_eq!(evaluated.policy.name, "steward-default-policy");

    let step = plan::plan(&evaluated.observed.plan_facts(false, &ctx.config));
    assert!(!step.changes_membership(), "{step:?}");
    let next = status::next_status(&evaluated, &step, &ctx);
    assert_eq!(next.ready_members, 0);
    let available = next.condition("Available").expect("Available is written");
    assert_eq!(available.status, "False", "{available:?}");
    assert_eq!(next.unverified_streak, 1);
    assert!(next.last_verified_time.is_none());
    assert_eq!(
        next.condition("VersionDrifted").map(|c| c.status.as_str()),
        Some("Unknown")
    );
    // No member answered, and the stored status had no version to keep.
    assert_eq!(next.version, None);
}

#[test]
fn at_rest_the_verification_time_moves_only_every_refresh() {
    let at = |s: i64| {
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(1_800_000_000 + s).unwrap(),
        ))
    };
    let stored = EtcdClusterStatus {
        ready_members: 3,
        last_verified_time: at(0),
        ..Default::default()
    };
    let refresh = Duration::from_secs(15);
    let later = |s| EtcdClusterStatus {
        last_verified_time: at(s),
        ..stored.clone()
    };
    // Nothing else changed: held back, so equal to what is stored.
    assert_eq!(status::at_rest(later(5), Some(&stored), refresh), stored);
    // Refresh reached: written.
    assert_eq!(
        status::at_rest(later(15), Some(&stored), refresh),
        later(15)
    );
    // Anything else changed: written at once, with the exact time.
    let changed = EtcdClusterStatus {
        ready_members: 2,
        ..later(5)
    };
    assert_eq!(
        status::at_rest(changed.clone(), Some(&stored), refresh),
        changed
    );
    assert_eq!(status::at_rest(later(5), None, refresh), later(5));
}

/// A verdict an SDK made of an exception it caught is written as it is,
/// but counts as a policy failure, so an alert on failures sees it.
#[tokio::test]
async fn a_verdict_for_a_caught_exception_counts_as_a_policy_failure() {
    let (ctx, _writers) = context();
    let cluster = Arc::new(stale_healthy_cluster());
    let observed = observe::observe(&cluster, &ctx).await;
    let mut evaluated = evaluate::evaluate(observed, &ctx).await;
    let step = plan::plan(&evaluated.observed.plan_facts(false, &ctx.config));
    let next = status::next_status(&evaluated, &step, &ctx);
    assert!(!report::health(&evaluated, &next).policy_failed);

    let caught = |type_: &str| sdk::Condition {
        type_: type_.into(),
        status: sdk::ConditionStatus::Unknown,
        reason: "PolicyError".into(),
        message: "the policy's evaluate raised KeyError: 'x' (app.py, line 3, in evaluate)".into(),
    };
    evaluated.verdict = sdk::Verdict {
        conditions: vec![caught("Available"), caught("Degraded")],
        ready_members: 0,
        decline_verification: None,
        requeue_after_ms: None,
        events: vec![],
    };
    assert!(evaluate::caught_by_sdk(&evaluated.verdict));
    let next = status::next_status(&evaluated, &step, &ctx);
    assert_eq!(
        next.condition("Available").map(|c| c.reason.as_str()),
        Some("PolicyError"),
        "written as the policy said"
    );
    assert!(report::health(&evaluated, &next).policy_failed);
}
