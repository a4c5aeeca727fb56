//! Recovery from permanent quorum loss, for docs/benchmarks.md:
//! - **quorum-loss recovery time**: a 5-member cluster in Automatic mode
//!   (`gracePeriodSeconds: 0`, so the figure is the recovery itself) loses
//!   3 members' data for good (PVC and Pod deleted while the operator is
//!   down); timed from the operator's return, with the last member already
//!   gone, to Available with 5 ready members again;
//! - **RPO**: a 3-member cluster with an EtcdBackupSchedule every minute and
//!   a writer putting a key every 100 ms; the whole cluster is destroyed 50 s
//!   into a minute (10 s before the next run), and the operator restores it
//!   from the newest verified snapshot. The figure is the revisions (and
//!   the seconds of writes) between the last acknowledged write and the
//!   restored cluster's revision.
//!
//! ```sh
//! ETCD_STEWARD_ETCD_DIR=$(scripts/ensure-etcd.sh) \
//! ETCD_STEWARD_KUBE_DIR=$(scripts/ensure-kube.sh) \
//! ETCD_STEWARD_SEAWEEDFS=$(scripts/ensure-go-tool.sh seaweedfs) \
//!   scripts/in-namespace.sh cargo bench --profile dev -p etcd-steward --bench recovery
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use etcd_steward::api::EtcdCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use steward_testbed::s3::S3Server;
use support::*;

/// Generous: one run on a shared 2-core machine, not a correctness test.
const PATIENCE: Duration = Duration::from_secs(900);

async fn apply(env: &Env, manifest: serde_json::Value) {
    let kind = manifest["kind"].as_str().unwrap().to_owned();
    let file = env.dir().join(format!("{kind}.json"));
    std::fs::write(&file, manifest.to_string()).unwrap();
    kubectl(&env.plane, &["apply", "-f", file.to_str().unwrap()]).await;
}

async fn wait_until(env: &Env, name: &str, what: &str, pred: impl Fn(&EtcdCluster) -> bool) {
    let start = Instant::now();
    loop {
        let c = env.clusters().get(name).await.unwrap();
        if pred(&c) {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{name}: never {what}: {}",
            describe(&c)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn available(c: &EtcdCluster, n: i32) -> bool {
    condition(c, "Available") == Some("True")
        && ready_members(c) == n
        && condition(c, "Reconciling") == Some("False")
}

async fn set_recovery(env: &Env, name: &str) {
    env.clusters()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"recovery": {
                "quorumLoss": "Automatic", "gracePeriodSeconds": 0
            }}})),
        )
        .await
        .unwrap();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("recovery: bench");
        return;
    }
    run(async {
        let mut env = Env::start().await;
        let mut rows: Vec<(String, String)> = Vec::new();

        // Quorum-loss recovery time.
        env.create_cluster("qloss", 5).await;
        set_recovery(&env, "qloss").await;
        wait_until(&env, "qloss", "Available", |c| available(c, 5)).await;
        let names = env.member_names("qloss").await;
        env.kill_operator().await;
        destroy_data(&env, &names[..3]).await;
        let start = Instant::now();
        env.start_operator();
        wait_until(&env, "qloss", "recovered", |c| {
            available(c, 5)
                && c.status
                    .as_ref()
                    .is_some_and(|s| s.last_recovery.is_some() && s.members.len() == 5)
        })
        .await;
        rows.push((
            "quorum-loss recovery, 3 of 5 lost (Automatic, grace 0): operator back to Available 5/5".into(),
            format!("{:.1} s", start.elapsed().as_secs_f64()),
        ));
        env.clusters()
            .delete("qloss", &Default::default())
            .await
            .unwrap();

        // RPO with a schedule every minute.
        let mut s3 = S3Server::start()
            .await
            .expect("SeaweedFS's S3 gateway starts");
        s3.create_bucket("etcd-backups").await.unwrap();
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
            "stringData": {"AWS_ACCESS_KEY_ID": s3.access_key_id, "AWS_SECRET_ACCESS_KEY": s3.secret_access_key},
        }))
        .unwrap();
        Api::<Secret>::namespaced(env.client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        env.create_cluster("rpo", 3).await;
        set_recovery(&env, "rpo").await;
        wait_until(&env, "rpo", "Available", |c| available(c, 3)).await;
        apply(
            &env,
            serde_json::json!({
                "apiVersion": "etcd.steward.dev/v1alpha1", "kind": "EtcdBackupSchedule",
                "metadata": {"name": "rpo-every-minute", "namespace": NS},
                "spec": {"clusterRef": {"name": "rpo"}, "schedule": "* * * * *",
                         "destination": {"s3": {"endpoint": s3.endpoint(), "bucket": "etcd-backups",
                            "credentialsSecretRef": {"name": "s3-creds"}, "forcePathStyle": true}},
                         "retention": {"keepLast": 5}},
            }),
        )
        .await;
        let endpoints: Vec<String> = env
            .endpoints("rpo")
            .await
            .split(',')
            .map(str::to_owned)
            .collect();
        let acked = Arc::new(AtomicI64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (acked, stop) = (acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut client = etcd_client::Client::connect(&endpoints, None)
                    .await
                    .unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let put = tokio::time::timeout(
                        Duration::from_secs(2),
                        client.put(format!("/rpo/{i:08}"), "v", None),
                    )
                    .await;
                    if let Ok(Ok(r)) = put {
                        let rev = r.header().map_or(0, |h| h.revision());
                        acked.fetch_max(rev, Ordering::Relaxed);
                        i += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        // Two scheduled runs Complete, then 50 s into the next minute.
        let snaps: Api<etcd_steward::api::EtcdSnapshot> = Api::namespaced(env.client.clone(), NS);
        let start = Instant::now();
        loop {
            let done = snaps
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|s| {
                    s.status
                        .as_ref()
                        .and_then(|st| st.condition("Verified"))
                        .is_some_and(|c| c.status == "True")
                })
                .count();
            if done >= 2 {
                break;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the schedule took no two snapshots"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        while jiff::Timestamp::now().as_second() % 60 != 50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let names = env.member_names("rpo").await;
        stop.store(true, Ordering::Relaxed);
        writer.await.unwrap();
        let last_acked = acked.load(Ordering::Relaxed);
        let destroyed_at = jiff::Timestamp::now();
        destroy_data(&env, &names).await;
        let start = Instant::now();
        wait_until(&env, "rpo", "restored from the newest snapshot", |c| {
            available(c, 3)
                && c.status.as_ref().is_some_and(|s| {
                    s.last_recovery
                        .as_ref()
                        .is_some_and(|r| r.from_snapshot.is_some())
                })
        })
        .await;
        let restore_took = start.elapsed();
        let c = env.clusters().get("rpo").await.unwrap();
        let r = c.status.unwrap().last_recovery.unwrap();
        let snap = snaps.get(r.from_snapshot.as_ref().unwrap()).await.unwrap();
        let st = snap.status.unwrap();
        let snap_rev = st.revision.unwrap();
        let snap_at = st.start_time.map(|t| t.0).unwrap();
        rows.push((
            "RPO, schedule every minute, cluster destroyed 50 s into a minute: revisions lost (last acknowledged write minus the restored snapshot's revision)".into(),
            format!(
                "{} revisions ({:.1} s of writes at 10/s); operator's lostRevisions {:?}",
                last_acked - snap_rev,
                destroyed_at.duration_since(snap_at).as_secs_f64(),
                r.lost_revisions
            ),
        ));
        rows.push((
            "whole-cluster loss: destroyed to Available 3/3 again from the snapshot (Automatic, grace 0)".into(),
            format!("{:.1} s", restore_took.as_secs_f64()),
        ));
        s3.stop().await;
        env.shutdown().await;

        println!("\n| measurement | result |\n|---|---|");
        for (what, value) in rows {
            println!("| {what} | {value} |");
        }
    });
}
