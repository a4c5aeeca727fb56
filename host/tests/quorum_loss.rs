//! Recovery from permanent quorum loss, on the real control plane with
//! real etcd: members' data is destroyed (their PVCs deleted with their
//! Pods) while the operator is down, so it finds the damage done.
//!
//! One control plane for every scenario, one after the other:
//! - 2 of 5 lost: the 3 left are a quorum; nothing is forced, the lost
//!   members are replaced one at a time;
//! - 3 of 5 lost, Automatic: after the grace period the survivor with the
//!   most data restarts with --force-new-cluster and the cluster grows
//!   back to 5 with every key;
//! - 2 of 3 lost, Manual: the status names the one command, nothing
//!   happens until it is run (with the real kubectl), then the same;
//! - every member lost, Automatic, with a verified EtcdSnapshot on a real
//!   S3 server (SeaweedFS): the cluster is restored from it, with a new
//!   cluster ID and the revisions lost counted.
//!
//! Each asserts on the status, on etcd's data and on its membership.

mod support;

use std::collections::BTreeSet;

use etcd_steward::api::EtcdCluster;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use support::*;

async fn put_keys(env: &Env, cluster: &str, prefix: &str, n: usize) {
    let endpoints = env.endpoints(cluster).await;
    for i in 0..n {
        env.etcdctl(&endpoints, &["put", &format!("/{prefix}/{i:03}"), "v"])
            .await;
    }
}

async fn keys(env: &Env, cluster: &str) -> BTreeSet<String> {
    let endpoints = env.endpoints(cluster).await;
    env.etcdctl(&endpoints, &["get", "/", "--prefix", "--keys-only"])
        .await
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// etcd's voters, by name, from `member list` on every current member.
async fn voters(env: &Env, cluster: &str) -> BTreeSet<String> {
    let endpoints = env.endpoints(cluster).await;
    env.etcdctl(&endpoints, &["member", "list"])
        .await
        .lines()
        .filter(|l| l.trim_end().ends_with("false"))
        .filter_map(|l| l.split(", ").nth(2).map(str::to_owned))
        .collect()
}

fn events_with(events: &[k8s_openapi::api::events::v1::Event], reason: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note.clone())
        .collect()
}

async fn events(env: &Env) -> Vec<k8s_openapi::api::events::v1::Event> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(env.client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
}

fn healthy(c: &EtcdCluster, n: usize) -> bool {
    condition(c, "Available") == Some("True")
        && condition(c, "Reconciling") == Some("False")
        && ready_members(c) == n as i32
        && c.status
            .as_ref()
            .is_some_and(|s| s.members.len() == n && s.quorum_loss.is_none())
}

#[test]
fn permanent_quorum_loss_is_recovered_from_a_survivor_and_never_while_a_quorum_answers() {
    run(async {
        let mut env = Env::start().await;

        // --- 5 members, Automatic.
        env.create_cluster("five", 5).await;
        env.clusters()
            .patch(
                "five",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"recovery": {
                    "quorumLoss": "Automatic", "gracePeriodSeconds": 60
                }}})),
            )
            .await
            .unwrap();
        let c = env.wait_available("five", 5).await;
        let cluster_id = c.status.as_ref().unwrap().cluster_id.clone().unwrap();
        put_keys(&env, "five", "a", 20).await;
        let before = keys(&env, "five").await;

        // 2 of 5 lost: the other 3 are a quorum. Nothing is forced; each
        // lost member is removed and a fresh one joins.
        let names = env.member_names("five").await;
        let two: Vec<String> = names[..2].to_vec();
        env.kill_operator().await;
        destroy_data(&env, &two).await;
        let watch = env.watch("five").await;
        env.start_operator();
        let seen = watch
            .record(async {
                env.wait_for("five", "the two lost members replaced", |c| {
                    healthy(c, 5)
                        && c.status
                            .as_ref()
                            .unwrap()
                            .members
                            .iter()
                            .all(|m| !two.contains(&m.name))
                })
                .await;
            })
            .await;
        for c in &seen {
            let s = c.status.as_ref().unwrap();
            assert!(
                s.quorum_loss.is_none() && s.last_recovery.is_none(),
                "2 of 5 lost is not quorum loss: {}",
                serde_json::to_string(s).unwrap()
            );
        }
        let c = env.clusters().get("five").await.unwrap();
        assert_eq!(
            c.status.as_ref().unwrap().cluster_id.as_deref(),
            Some(cluster_id.as_str())
        );
        assert_eq!(keys(&env, "five").await, before);
        let now = env.member_names("five").await;
        assert_eq!(voters(&env, "five").await, now.iter().cloned().collect());
        assert!(names[2..].iter().all(|n| now.contains(n)), "{now:?}");
        let ev = events(&env).await;
        for m in &two {
            assert!(
                events_with(&ev, "ReplacingLostMember")
                    .iter()
                    .any(|n| n.contains(m.as_str())),
                "no ReplacingLostMember Event for {m}"
            );
        }
        assert!(events_with(&ev, "RecoveringFromQuorumLoss").is_empty());

        // 3 of 5 lost for good, Automatic: recovered from a survivor.
        put_keys(&env, "five", "b", 20).await;
        let before = keys(&env, "five").await;
        let names = env.member_names("five").await;
        let three: Vec<String> = names[..3].to_vec();
        let survivors: Vec<String> = names[3..].to_vec();
        let ids_before: std::collections::BTreeMap<String, String> = env
            .clusters()
            .get("five")
            .await
            .unwrap()
            .status
            .unwrap()
            .members
            .into_iter()
            .filter_map(|m| Some((m.name, m.id?)))
            .collect();
        env.kill_operator().await;
        destroy_data(&env, &three).await;
        let watch = env.watch("five").await;
        env.start_operator();
        // Within the grace period (60 s from the last verified quorum) it
        // is reported and waited out, with every survivor answering.
        let c = watch
            .until("the quorum loss reported, its recovery pending", |c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.quorum_loss.as_ref())
                    .is_some_and(|q| q.recover_from.is_some())
                    && c.status.as_ref().unwrap().conditions.iter().any(|k| {
                        k.message.contains("recovering from")
                            && k.message.contains(" s (spec.recovery.gracePeriodSeconds)")
                    })
            })
            .await;
        assert!(c.status.as_ref().unwrap().last_recovery.is_none());
        let q = c.status.as_ref().unwrap().quorum_loss.clone().unwrap();
        let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
        assert_eq!(
            q.lost
                .iter()
                .map(|l| l.name.clone())
                .collect::<BTreeSet<_>>(),
            set(&three)
        );
        assert!(
            q.lost.iter().all(|l| l.reason.contains("was deleted")),
            "{q:?}"
        );
        assert_eq!(
            q.survivors
                .iter()
                .map(|s| s.name.clone())
                .collect::<BTreeSet<_>>(),
            set(&survivors)
        );
        assert!(
            q.survivors.iter().all(|s| s.raft_applied_index.is_some()),
            "{q:?}"
        );
        assert!(q.action.starts_with("Automatic"), "{q:?}");
        assert_eq!(condition(&c, "Available"), Some("False"));

        let c = env
            .wait_for("five", "recovered to 5 members", |c| {
                healthy(c, 5) && c.status.as_ref().unwrap().last_recovery.is_some()
            })
            .await;
        let s = c.status.as_ref().unwrap();
        let r = s.last_recovery.as_ref().unwrap();
        let from = r.from_member.clone().unwrap();
        assert!(survivors.contains(&from), "{r:?}");
        assert_eq!(set(&r.lost_members), set(&three));
        assert_eq!(r.mode, etcd_steward::api::QuorumLossMode::Automatic);
        assert_eq!(s.cluster_id.as_deref(), Some(cluster_id.as_str()));
        env.assert_read_healthy(&c);
        assert_eq!(
            keys(&env, "five").await,
            before,
            "every key the survivor had"
        );
        let now = env.member_names("five").await;
        assert_eq!(now.len(), 5);
        assert!(now.contains(&from));
        assert_eq!(voters(&env, "five").await, now.iter().cloned().collect());
        // --force-new-cluster keeps the member's data and its etcd identity.
        let id_after = s
            .members
            .iter()
            .find(|m| m.name == from)
            .and_then(|m| m.id.clone());
        assert_eq!(
            id_after.as_ref(),
            ids_before.get(&from),
            "{from} keeps its member ID"
        );
        let recovered_from = env.members().get(&from).await.unwrap();
        assert!(
            !recovered_from.spec.force_new_cluster,
            "the flag is cleared"
        );
        let ev = events(&env).await;
        assert!(
            events_with(&ev, "RecoveringFromQuorumLoss")
                .iter()
                .any(|n| n.contains(&from) && n.contains("Automatic")),
            "{:?}",
            events_with(&ev, "RecoveringFromQuorumLoss")
        );
        assert!(!events_with(&ev, "QuorumRecovered").is_empty());
        env.clusters()
            .delete("five", &Default::default())
            .await
            .unwrap();

        // --- 3 members, Manual (the default).
        env.create_cluster("three", 3).await;
        env.wait_available("three", 3).await;
        // An annotation set while the quorum is verified authorises nothing:
        // it is removed, and cannot authorise the next quorum loss.
        env.clusters()
            .patch(
                "three",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                    etcd_steward::api::ANNOTATION_RECOVER_FROM: "ahead-of-time"
                }}})),
            )
            .await
            .unwrap();
        env.wait_for("three", "the ahead-of-time annotation removed", |c| {
            !c.annotations()
                .contains_key(etcd_steward::api::ANNOTATION_RECOVER_FROM)
        })
        .await;
        put_keys(&env, "three", "m", 10).await;
        let before = keys(&env, "three").await;
        let names = env.member_names("three").await;
        let two: Vec<String> = names[..2].to_vec();
        env.kill_operator().await;
        destroy_data(&env, &two).await;
        env.start_operator();
        let c = env
            .wait_for("three", "Stalled with the command to run", |c| {
                condition_reason(c, "Stalled") == Some("PermanentQuorumLoss")
            })
            .await;
        let q = c.status.as_ref().unwrap().quorum_loss.clone().unwrap();
        assert_eq!(q.recover_from.as_deref(), Some(names[2].as_str()));
        assert!(
            condition_message(&c, "Stalled").is_some_and(|m| m.ends_with(&q.action)),
            "{:?}",
            condition_message(&c, "Stalled")
        );
        // Nothing happens until a person acts.
        tokio::time::sleep(std::time::Duration::from_secs(15)).await;
        let c = env.clusters().get("three").await.unwrap();
        assert!(c.status.as_ref().unwrap().last_recovery.is_none());
        assert_eq!(condition_reason(&c, "Stalled"), Some("PermanentQuorumLoss"));
        assert_eq!(env.member_names("three").await, names);
        assert!(
            !env.members()
                .get(&names[2])
                .await
                .unwrap()
                .spec
                .force_new_cluster
        );
        // The command, exactly as the status gives it.
        let words: Vec<&str> = q.action.split_whitespace().collect();
        assert_eq!(words[0], "kubectl", "{}", q.action);
        kubectl(&env.plane, &words[1..]).await;
        let c = env
            .wait_for("three", "recovered to 3 members", |c| {
                healthy(c, 3) && c.status.as_ref().unwrap().last_recovery.is_some()
            })
            .await;
        let r = c.status.as_ref().unwrap().last_recovery.clone().unwrap();
        assert_eq!(r.from_member.as_deref(), Some(names[2].as_str()));
        assert_eq!(r.mode, etcd_steward::api::QuorumLossMode::Manual);
        assert!(
            !c.annotations()
                .contains_key(etcd_steward::api::ANNOTATION_RECOVER_FROM),
            "the annotation authorised one recovery, not the next"
        );
        assert_eq!(condition(&c, "Stalled"), Some("False"));
        assert_eq!(keys(&env, "three").await, before);
        let now = env.member_names("three").await;
        assert_eq!(voters(&env, "three").await, now.iter().cloned().collect());
        env.clusters()
            .delete("three", &Default::default())
            .await
            .unwrap();

        // --- Every member lost, Automatic, with a verified snapshot on a
        // real S3 server: the cluster is restored from it.
        let mut s3 = steward_testbed::s3::S3Server::start()
            .await
            .expect("SeaweedFS's S3 gateway starts");
        s3.create_bucket("etcd-backups").await.unwrap();
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
            "stringData": {"AWS_ACCESS_KEY_ID": s3.access_key_id, "AWS_SECRET_ACCESS_KEY": s3.secret_access_key},
        }))
        .unwrap();
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), NS)
            .create(&Default::default(), &secret)
            .await
            .unwrap();
        env.create_cluster("gone", 3).await;
        env.clusters()
            .patch(
                "gone",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"recovery": {
                    "quorumLoss": "Automatic", "gracePeriodSeconds": 5
                }}})),
            )
            .await
            .unwrap();
        let c = env.wait_available("gone", 3).await;
        let old_id = c.status.as_ref().unwrap().cluster_id.clone().unwrap();
        put_keys(&env, "gone", "s", 10).await;
        let in_snapshot = keys(&env, "gone").await;
        let snaps: Api<etcd_steward::api::EtcdSnapshot> = Api::namespaced(env.client.clone(), NS);
        let snap: etcd_steward::api::EtcdSnapshot = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.steward.dev/v1alpha1", "kind": "EtcdSnapshot",
            "metadata": {"name": "gone-snap"},
            "spec": {"clusterRef": {"name": "gone"}, "destination": {"s3": {
                "endpoint": s3.endpoint(), "bucket": "etcd-backups",
                "credentialsSecretRef": {"name": "s3-creds"}, "forcePathStyle": true,
            }}},
        }))
        .unwrap();
        snaps.create(&Default::default(), &snap).await.unwrap();
        let start = std::time::Instant::now();
        let snap = loop {
            let s = snaps.get("gone-snap").await.unwrap();
            let verified = s
                .status
                .as_ref()
                .and_then(|st| st.condition("Verified"))
                .is_some_and(|c| c.status == "True");
            if verified {
                break s;
            }
            assert!(start.elapsed() < EVENTUALLY, "{:?}", s.status);
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        };
        let snap_revision = snap.status.as_ref().unwrap().revision.unwrap();
        // Written after the snapshot: what the restore loses, and what
        // lostRevisions counts once the operator has read it with quorum.
        put_keys(&env, "gone", "late", 5).await;
        let endpoints = env.endpoints("gone").await;
        let status = env
            .etcdctl(&endpoints, &["endpoint", "status", "--write-out=json"])
            .await;
        let late_revision = serde_json::from_str::<serde_json::Value>(&status).unwrap()[0]["Status"]
            ["header"]["revision"]
            .as_i64()
            .unwrap();
        env.wait_for("gone", "the late writes read with quorum", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.last_verified_revision)
                .is_some_and(|r| r >= late_revision)
        })
        .await;
        let names = env.member_names("gone").await;
        env.kill_operator().await;
        destroy_data(&env, &names).await;
        env.start_operator();
        let c = env
            .wait_for("gone", "restored from the snapshot", |c| {
                healthy(c, 3)
                    && c.status
                        .as_ref()
                        .unwrap()
                        .last_recovery
                        .as_ref()
                        .is_some_and(|r| r.from_snapshot.as_deref() == Some("gone-snap"))
            })
            .await;
        let s = c.status.as_ref().unwrap();
        let r = s.last_recovery.as_ref().unwrap();
        assert_eq!(r.mode, etcd_steward::api::QuorumLossMode::Automatic);
        assert_eq!(r.from_member, None);
        assert_eq!(r.revision, Some(snap_revision));
        assert_eq!(
            r.lost_revisions,
            Some(late_revision - snap_revision),
            "{r:?}"
        );
        assert_eq!(set(&r.lost_members), set(&names));
        assert_ne!(
            s.cluster_id.as_deref(),
            Some(old_id.as_str()),
            "a new cluster ID"
        );
        env.assert_read_healthy(&c);
        assert_eq!(
            keys(&env, "gone").await,
            in_snapshot,
            "the snapshot's keys, not the late ones"
        );
        let now = env.member_names("gone").await;
        assert!(now.iter().all(|n| !names.contains(n)), "{now:?}");
        assert_eq!(voters(&env, "gone").await, now.iter().cloned().collect());
        let ev = events(&env).await;
        assert!(
            events_with(&ev, "RecoveringFromQuorumLoss")
                .iter()
                .any(|n| n.contains("EtcdSnapshot gone-snap")),
            "{:?}",
            events_with(&ev, "RecoveringFromQuorumLoss")
        );
        s3.stop().await;
        env.shutdown().await;
    });
}
