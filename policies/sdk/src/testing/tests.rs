use super::*;

const MINIMAL_OBSERVATION: &str = "
      spec: {desiredReplicas: 1}
      probing: {Skipped: no TLS secret}
      now: 1000";

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn one_case(expect: &str) -> String {
    format!("cases:\n  - name: c\n    observation:{MINIMAL_OBSERVATION}\n    expect:\n{expect}\n")
}

fn parse_error(text: &str) -> (String, CaseFileError) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "bad.yaml", text);
    let err = load_case_file(&path).unwrap_err();
    (path.display().to_string(), err)
}

#[test]
fn reads_a_full_case() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "ok.yaml",
        "cases:
  - name: healthy
    settings: {staleAfterSeconds: 45, nested: {a: [1, 2]}}
    observation:
      spec: {desiredReplicas: 3}
      members:
        - {name: etcd-a, podPhase: Running, podReady: true, memberId: 8e9e05c52164694d}
      probing:
        Attempted:
          endpoints:
            - member: etcd-a
              outcome: {Answered: {memberId: 8e9e05c52164694d, leaderId: 8e9e05c52164694d, alarms: [Nospace]}}
          memberList: NotAttempted
          quorumRead: Succeeded
      history:
        previousConditions:
          - {type: Available, status: True, reason: QuorumHealthy, since: 5}
      now: 1000
    expect:
      conditions:
        - {type: Available, status: True, reason: QuorumHealthy}
        - {type: Degraded, status: False, messageContains: all}
      readyMembers: 3
      verified: true
      requeueAfterMs: null
      events:
        - {type: Warning, reason: InvalidSettings}
",
    );
    let file = load_case_file(&path).unwrap();
    assert_eq!(file.path, path);
    let case = &file.cases[0];
    assert_eq!(case.name, "healthy");
    let obs = case.observation();
    let settings: serde_json::Value = serde_json::from_str(&obs.settings).unwrap();
    assert_eq!(
        settings,
        serde_json::json!({"staleAfterSeconds": 45, "nested": {"a": [1, 2]}})
    );
    assert_eq!(obs.members[0].member_id, Some(0x8e9e05c52164694d));
    assert_eq!(
        obs.history.previous_conditions[0].status,
        ConditionStatus::True,
        "unquoted True in the observation"
    );
    let expect = &case.expect;
    assert_eq!(expect.conditions[0].status, ConditionStatus::True);
    assert_eq!(
        expect.conditions[0].reason.as_deref(),
        Some("QuorumHealthy")
    );
    assert_eq!(expect.conditions[1].status, ConditionStatus::False);
    assert_eq!(expect.conditions[1].reason, None);
    assert_eq!(expect.ready_members, Some(3));
    assert_eq!(expect.verified, Some(true));
    assert_eq!(expect.requeue_after_ms, Some(None));
    assert_eq!(expect.events[0].type_, EventType::Warning);
}

#[test]
fn condition_status_reads_quoted_and_unquoted() {
    for (yaml, want) in [
        ("True", ConditionStatus::True),
        ("\"True\"", ConditionStatus::True),
        ("'True'", ConditionStatus::True),
        ("False", ConditionStatus::False),
        ("\"False\"", ConditionStatus::False),
        ("Unknown", ConditionStatus::Unknown),
        ("true", ConditionStatus::True),
        ("false", ConditionStatus::False),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let text = one_case(&format!(
            "      conditions:\n        - {{type: Available, status: {yaml}}}"
        ));
        let file = load_case_file(write(&dir, "s.yaml", &text))
            .unwrap_or_else(|e| panic!("status: {yaml}: {e}"));
        assert_eq!(
            file.cases[0].expect.conditions[0].status, want,
            "status: {yaml}"
        );
    }
}

#[test]
fn a_condition_status_that_is_no_status_is_refused() {
    for yaml in ["\"TRUE\"", "Maybe", "yes", "1"] {
        let text = one_case(&format!(
            "      conditions:\n        - {{type: Available, status: {yaml}}}"
        ));
        let (_, err) = parse_error(&text);
        assert!(err.to_string().contains("True, False"), "{yaml}: {err}");
    }
}

#[test]
fn observation_settings_stay_when_the_case_sets_none() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "cases:\n  - name: c\n    observation:{MINIMAL_OBSERVATION}\n      settings: {{x: 1}}\n    expect: {{}}\n"
    );
    let file = load_case_file(write(&dir, "s.yaml", &text)).unwrap();
    assert_eq!(file.cases[0].observation().settings, r#"{"x":1}"#);
}

#[test]
fn unknown_field_names_file_line_column_and_field() {
    let text = one_case("      readyMember: 3");
    let (path, err) = parse_error(&text);
    let CaseFileError::Parse {
        line,
        column,
        field,
        message,
        ..
    } = &err
    else {
        panic!("not a parse error: {err}");
    };
    assert_eq!(*line, 8, "{err}");
    assert_eq!(*column, 7, "{err}");
    assert_eq!(field, "cases[0].expect.readyMember", "{err}");
    assert!(message.contains("unknown field `readyMember`"), "{err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{path}:8:7: cases[0].expect.readyMember: ")),
        "{shown}"
    );
    assert!(!shown.contains('\n'), "one line: {shown}");
}

#[test]
fn bad_enum_value_names_field() {
    let text = one_case("      conditions:\n        - {type: Available, status: Yes}");
    let (path, err) = parse_error(&text);
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{path}:9:")),
        "line of the bad value: {shown}"
    );
    assert!(
        shown.contains("cases[0].expect.conditions[0].status"),
        "{shown}"
    );
    assert!(
        shown.contains("unknown variant `Yes`"),
        "names the bad value: {shown}"
    );
}

#[test]
fn wrong_type_names_field() {
    let text = one_case("      readyMembers: three");
    let (path, err) = parse_error(&text);
    let shown = err.to_string();
    assert!(shown.starts_with(&format!("{path}:8:21: ")), "{shown}");
    assert!(
        shown.contains("cases[0].expect.readyMembers: invalid u32"),
        "{shown}"
    );
}

#[test]
fn error_deep_in_the_observation_names_the_path() {
    let text = "cases:
  - name: c
    observation:
      spec: {desiredReplicas: 1}
      members:
        - {name: a, podPhase: Sleeping}
      probing: {Skipped: x}
      now: 1
    expect: {}
";
    let (path, err) = parse_error(text);
    let shown = err.to_string();
    assert!(shown.starts_with(&format!("{path}:6:")), "{shown}");
    assert!(
        shown.contains("cases[0].observation.members[0].podPhase"),
        "{shown}"
    );
}

#[test]
fn settings_must_be_a_mapping() {
    let text = format!(
        "cases:\n  - name: c\n    settings: [1]\n    observation:{MINIMAL_OBSERVATION}\n    expect: {{}}\n"
    );
    let (path, err) = parse_error(&text);
    let shown = err.to_string();
    assert!(shown.starts_with(&format!("{path}:3:")), "{shown}");
    assert!(shown.contains("cases[0].settings"), "{shown}");
}

#[test]
fn yaml_syntax_error_has_a_position() {
    let (path, err) = parse_error("cases:\n  - name: \"unterminated\n");
    let shown = err.to_string();
    assert!(shown.starts_with(&format!("{path}:")), "{shown}");
    assert!(
        matches!(err, CaseFileError::Parse { line, .. } if line > 0),
        "{shown}"
    );
    assert!(!shown.contains('\n'), "one line: {shown}");
}

#[test]
fn duplicate_names_and_empty_files_are_refused() {
    let case = format!("  - name: same\n    observation:{MINIMAL_OBSERVATION}\n    expect: {{}}\n");
    let (_, err) = parse_error(&format!("cases:\n{case}{case}"));
    assert!(err.to_string().contains("\"same\" is used twice"), "{err}");
    let (_, err) = parse_error("cases: []\n");
    assert!(err.to_string().contains("no cases"), "{err}");
}

#[test]
fn missing_file_is_named() {
    let err = load_case_file("/nonexistent/cases.yaml").unwrap_err();
    assert!(
        err.to_string().starts_with("/nonexistent/cases.yaml: "),
        "{err}"
    );
}

#[test]
fn directories_give_their_yaml_files_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let case = |name: &str| {
        format!(
            "cases:\n  - name: {name}\n    observation:{MINIMAL_OBSERVATION}\n    expect: {{}}\n"
        )
    };
    write(&dir, "b.yml", &case("second"));
    write(&dir, "a.yaml", &case("first"));
    write(&dir, "notes.txt", "not yaml");
    std::fs::create_dir(dir.path().join("fixtures")).unwrap();
    write(&dir, "fixtures/ignored.yaml", "not a case file");
    let other = tempfile::tempdir().unwrap();
    let single = write(&other, "c-single.yaml", &case("third"));
    let files = load_cases(&[dir.path().to_owned(), single.clone()]).unwrap();
    let names: Vec<&str> = files.iter().map(|f| f.cases[0].name.as_str()).collect();
    assert_eq!(names, ["first", "second", "third"]);
}

fn verdict() -> Verdict {
    Verdict {
        conditions: vec![
            crate::Condition::new("Available", ConditionStatus::False, "QuorumLost", "1 of 3"),
            crate::Condition::new(
                "Degraded",
                ConditionStatus::True,
                "MembersUnhealthy",
                "b: x",
            ),
        ],
        ready_members: 1,
        decline_verification: None,
        requeue_after_ms: Some(5000),
        events: vec![],
    }
}

#[test]
fn check_passes_a_matching_subset() {
    let expect = Expectation {
        conditions: vec![ExpectedCondition {
            type_: "Available".into(),
            status: ConditionStatus::False,
            reason: Some("QuorumLost".into()),
            message: None,
            message_contains: Some("1 of".into()),
        }],
        ready_members: Some(1),
        verified: Some(false),
        requeue_after_ms: Some(Some(5000)),
        events: vec![],
        exhaustive: false,
        settings_rejected: None,
        rejected: None,
    };
    assert_eq!(check(&expect, &verdict(), false), vec![]);
}

#[test]
fn check_reports_every_difference_readably() {
    let expect = Expectation {
        conditions: vec![
            ExpectedCondition {
                type_: "Available".into(),
                status: ConditionStatus::True,
                reason: Some("QuorumHealthy".into()),
                message: None,
                message_contains: Some("3 of 3".into()),
            },
            ExpectedCondition {
                type_: "Progressing".into(),
                status: ConditionStatus::False,
                reason: None,
                message: None,
                message_contains: None,
            },
        ],
        ready_members: Some(3),
        verified: Some(true),
        requeue_after_ms: Some(None),
        events: vec![ExpectedEvent {
            type_: EventType::Warning,
            reason: "InvalidSettings".into(),
            message: None,
            message_contains: None,
        }],
        exhaustive: false,
        settings_rejected: None,
        rejected: None,
    };
    let shown: Vec<String> = check(&expect, &verdict(), false)
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(
        shown,
        [
            "Available.status: expected True, got False (QuorumLost: \"1 of 3\")",
            "Available.reason: expected QuorumHealthy, got QuorumLost (\"1 of 3\")",
            "Available.message: expected to contain \"3 of 3\", got \"1 of 3\"",
            "Progressing: expected a condition of this type, got none (conditions: Available, Degraded)",
            "readyMembers: expected 3, got 1",
            "verified: expected true, got false",
            "requeueAfterMs: expected no hint, got 5000 ms",
            "events: expected a Warning event InvalidSettings, got no events",
        ]
    );
}

fn rejection_case(expect: &str) -> Case {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "cases:\n  - name: c\n    settings: {{staleAfterSeconds: 0}}\n    observation:{MINIMAL_OBSERVATION}\n    expect:\n{expect}\n"
    );
    let path = write(&dir, "c.yaml", &text);
    load_case_file(&path).unwrap().cases.remove(0)
}

fn reject(settings: &str) -> Result<(), String> {
    if settings.contains("\"staleAfterSeconds\":0") {
        Err("staleAfterSeconds must be at least 1".into())
    } else {
        Ok(())
    }
}

#[test]
fn rejected_settings_are_never_evaluated_and_pass_only_when_expected() {
    let case = rejection_case("      settingsRejected: {messageContains: at least 1}");
    let outcome = Outcome::of(&case, reject, |_| panic!("evaluated rejected settings"));
    assert_eq!(
        outcome,
        Outcome::SettingsRejected("staleAfterSeconds must be at least 1".into())
    );
    assert_eq!(check_outcome(&case.expect, &outcome), vec![]);

    let wrong = rejection_case("      settingsRejected: {messageContains: at most 9}");
    let shown = check_outcome(&wrong.expect, &outcome)[0].to_string();
    assert!(
        shown.starts_with("settingsRejected.message: expected to contain \"at most 9\""),
        "{shown}"
    );

    // A case that does not expect the rejection fails, and says why.
    let unexpected = rejection_case("      conditions: [{type: Available, status: True}]");
    let outcome = Outcome::of(&unexpected, reject, |_| {
        panic!("evaluated rejected settings")
    });
    let shown = check_outcome(&unexpected.expect, &outcome)[0].to_string();
    assert!(
        shown.starts_with("settings: expected accepted by validate-settings"),
        "{shown}"
    );
    assert!(shown.contains("at least 1"), "{shown}");
}

#[test]
fn an_expected_rejection_of_accepted_settings_fails() {
    let case = rejection_case("      settingsRejected: {}");
    let outcome = Outcome::of(&case, |_| Ok(()), |_| verdict());
    assert_eq!(
        check_outcome(&case.expect, &outcome)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["settingsRejected: expected validate-settings to reject the settings, got accepted"]
    );
}

#[test]
fn a_rejection_case_cannot_also_expect_a_verdict() {
    let (_, err) = parse_error(&format!(
        "cases:\n  - name: both\n    observation:{MINIMAL_OBSERVATION}\n    expect:\n      settingsRejected: {{}}\n      readyMembers: 1\n"
    ));
    let shown = err.to_string();
    assert!(
        shown.contains("settingsRejected cannot be combined"),
        "{shown}"
    );
    assert!(shown.contains("\"both\""), "{shown}");
}

#[test]
fn exhaustive_refuses_conditions_and_events_not_listed() {
    let expect = Expectation {
        conditions: vec![ExpectedCondition {
            type_: "Available".into(),
            status: ConditionStatus::False,
            reason: None,
            message: Some("1 of 3".into()),
            message_contains: None,
        }],
        exhaustive: true,
        ..Expectation::default()
    };
    let mut v = verdict();
    v.events.push(crate::Event {
        type_: EventType::Normal,
        reason: "Extra".into(),
        message: "m".into(),
    });
    let shown: Vec<String> = check(&expect, &v, false)
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(
        shown,
        [
            "conditions: expected only the listed types (exhaustive), got also Degraded True (MembersUnhealthy)",
            "events: expected only the listed events (exhaustive), got also a Normal event Extra: \"m\"",
        ]
    );
}

#[test]
fn an_exact_message_must_match_whole() {
    let expect = Expectation {
        conditions: vec![ExpectedCondition {
            type_: "Available".into(),
            status: ConditionStatus::False,
            reason: None,
            message: Some("1 of".into()),
            message_contains: None,
        }],
        ..Expectation::default()
    };
    let shown: Vec<String> = check(&expect, &verdict(), false)
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(
        shown,
        ["Available.message: expected \"1 of\", got \"1 of 3\""]
    );
}

#[test]
fn a_member_id_given_as_a_yaml_number_is_refused() {
    let (_, err) = parse_error(
        "cases:\n  - name: c\n    observation:\n      spec: {desiredReplicas: 1}\n      \
         members: [{name: a, memberId: 10}]\n      probing: {Skipped: x}\n      now: 0\n    expect: {}\n",
    );
    let text = err.to_string();
    assert!(
        text.contains("cases[0].observation.members[0].memberId"),
        "{text}"
    );
    assert!(
        text.contains(r#"write "10" if those are hex digits, or "a" for the number 10"#),
        "{text}"
    );
}

#[test]
fn observation_settings_are_a_mapping_handed_over_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "obs.yaml",
        "spec: {desiredReplicas: 1}\nprobing: {Skipped: x}\nnow: 0\nsettings: {a: 1, b: [true]}\n",
    );
    let obs = load_observation(&path).unwrap();
    let settings: serde_json::Value = serde_json::from_str(&obs.settings).unwrap();
    assert_eq!(settings, serde_json::json!({"a": 1, "b": [true]}));
    // And back: a mapping again, not JSON text in a string.
    let yaml = serde_saphyr::to_string(&obs).unwrap();
    assert!(yaml.contains("settings:") && !yaml.contains("'{"), "{yaml}");

    let text =
        "spec: {desiredReplicas: 1}\nprobing: {Skipped: x}\nnow: 0\nsettings: '{\"a\": 1}'\n";
    let path = write(&dir, "text.yaml", text);
    let err = load_observation(&path).unwrap_err().to_string();
    assert!(err.contains("settings"), "JSON text is refused: {err}");
}

#[test]
fn enum_values_and_variant_cases_are_pascal_case_only() {
    for (old, field) in [
        ("phase: steady", "phase"),
        ("probing: {skipped: x}", "probing"),
    ] {
        let text = format!(
            "spec: {{desiredReplicas: 1}}\nnow: 0\n{old}\n{}",
            if field == "probing" {
                ""
            } else {
                "probing: {Skipped: x}\n"
            }
        );
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "old.yaml", &text);
        let err = load_observation(&path).unwrap_err().to_string();
        assert!(err.contains(field), "{old}: {err}");
    }
}

#[test]
fn backup_facts_are_read_camel_case_and_absent_means_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "backup.yaml",
        "spec: {desiredReplicas: 1}\nprobing: {Skipped: x}\nnow: 0\n\
         backup: {schedule: nightly, scheduleCreated: 5, intervalMs: 86400000, lastSuccess: 7}\n",
    );
    let obs = load_observation(&path).unwrap();
    assert_eq!(
        obs.backup,
        Some(crate::BackupFacts {
            schedule: "nightly".into(),
            schedule_created: 5,
            interval_ms: 86_400_000,
            last_success: Some(7),
        })
    );
    // Never succeeded: lastSuccess is left out.
    let path = write(
        &dir,
        "never.yaml",
        "spec: {desiredReplicas: 1}\nprobing: {Skipped: x}\nnow: 0\n\
         backup: {schedule: nightly, scheduleCreated: 5, intervalMs: 1000}\n",
    );
    assert_eq!(
        load_observation(&path)
            .unwrap()
            .backup
            .unwrap()
            .last_success,
        None
    );
    let path = write(
        &dir,
        "none.yaml",
        "spec: {desiredReplicas: 1}\nprobing: {Skipped: x}\nnow: 0\n",
    );
    assert_eq!(load_observation(&path).unwrap().backup, None);
    // A typo is refused like any unknown field.
    let path = write(
        &dir,
        "typo.yaml",
        "spec: {desiredReplicas: 1}\nprobing: {Skipped: x}\nnow: 0\n\
         backup: {schedule: nightly, scheduleCreated: 5, interval: 1000}\n",
    );
    let err = load_observation(&path).unwrap_err().to_string();
    assert!(err.contains("interval"), "{err}");
}

#[test]
fn an_answers_revision_is_read_and_absent_means_zero() {
    let dir = tempfile::tempdir().unwrap();
    let revision = |name: &str, answer: &str| {
        let path = write(
            &dir,
            name,
            &format!(
                "spec: {{desiredReplicas: 1}}\nnow: 0\nprobing: {{Attempted: {{endpoints: \
                 [{{member: etcd-a, outcome: {{Answered: {answer}}}}}]}}}}\n"
            ),
        );
        match load_observation(&path).unwrap().probing {
            crate::Probing::Attempted(report) => match &report.endpoints[0].outcome {
                crate::ProbeOutcome::Answered(s) => (s.raft_applied_index, s.revision),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        revision(
            "revision.yaml",
            "{memberId: \"a1\", raftAppliedIndex: 900, revision: 4711}"
        ),
        (900, 4711)
    );
    // Case files written before 0.3.0 still load.
    assert_eq!(
        revision("older.yaml", "{memberId: \"a1\", raftAppliedIndex: 900}"),
        (900, 0)
    );
}
