//! Which of a schedule's completed snapshots retention keeps: the newest
//! `keepLast`, and the newest in each of the last `hourly` hours, `daily`
//! days and `weekly` weeks (UTC), as etcd-druid's exponential policy keeps
//! them. A snapshot any rule keeps is kept; the newest always is.

use std::collections::BTreeSet;

use crate::api::Retention;

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;

/// The indexes into `taken` (completion times, Unix seconds, any order)
/// that `r` keeps at `now`.
pub fn keep(taken: &[i64], r: &Retention, now: i64) -> BTreeSet<usize> {
    let mut newest_first: Vec<usize> = (0..taken.len()).collect();
    newest_first.sort_by_key(|&i| std::cmp::Reverse(taken[i]));
    let mut kept: BTreeSet<usize> = newest_first
        .iter()
        .take(r.keep_last.max(1) as usize)
        .copied()
        .collect();
    for (period, count) in [(HOUR, r.hourly), (DAY, r.daily), (WEEK, r.weekly)] {
        if count == 0 {
            continue;
        }
        let current = now.div_euclid(period);
        let oldest = current - i64::from(count) + 1;
        let mut seen = BTreeSet::new();
        for &i in &newest_first {
            let bucket = taken[i].div_euclid(period);
            if bucket >= oldest && bucket <= current && seen.insert(bucket) {
                kept.insert(i);
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(keep_last: u32, hourly: u32, daily: u32, weekly: u32) -> Retention {
        Retention {
            keep_last,
            hourly,
            daily,
            weekly,
        }
    }

    #[test]
    fn keep_last_keeps_the_newest_n_whatever_the_order() {
        let taken = [30, 10, 50, 20, 40];
        assert_eq!(keep(&taken, &r(2, 0, 0, 0), 60), BTreeSet::from([2, 4]));
        // At least the newest, even if asked for none.
        assert_eq!(keep(&taken, &r(0, 0, 0, 0), 60), BTreeSet::from([2]));
    }

    #[test]
    fn exponential_retention_keeps_one_per_period_and_drops_the_rest() {
        // Every 15 minutes for three days, ending now.
        let now = 10 * WEEK + 3 * DAY;
        let taken: Vec<i64> = (0..(3 * 24 * 4)).map(|i| now - i * 15 * 60).collect();
        let kept = keep(&taken, &r(4, 6, 2, 0), now);
        // The last 4 (the last hour), one per each of the last 6 hours
        // (3 new ones beyond the last hour... plus overlaps), one per each
        // of the last 2 days.
        let times: BTreeSet<i64> = kept.iter().map(|&i| now - taken[i]).collect();
        for fresh in [0, 15 * 60, 30 * 60, 45 * 60] {
            assert!(times.contains(&fresh), "keepLast: {fresh}s old");
        }
        // Each of the last 6 hours has exactly its newest snapshot kept.
        for h in 0..6 {
            let in_hour: Vec<&i64> = kept
                .iter()
                .map(|&i| &taken[i])
                .filter(|t| t.div_euclid(HOUR) == now.div_euclid(HOUR) - h)
                .collect();
            assert!(!in_hour.is_empty(), "hour -{h} kept nothing");
        }
        // Two days: today's newest and yesterday's newest.
        let yesterday = now.div_euclid(DAY) - 1;
        let newest_yesterday = taken
            .iter()
            .copied()
            .filter(|t| t.div_euclid(DAY) == yesterday)
            .max()
            .unwrap();
        assert!(kept.iter().any(|&i| taken[i] == newest_yesterday));
        // Nothing from two days ago survives, and most are dropped.
        assert!(kept.iter().all(|&i| taken[i].div_euclid(DAY) >= yesterday));
        assert!(kept.len() < 15, "{} kept", kept.len());
    }

    #[test]
    fn weekly_reaches_back_whole_weeks() {
        let now = 20 * WEEK + 2 * DAY;
        let taken = [
            now - 3 * WEEK,
            now - 2 * WEEK,
            now - WEEK - DAY,
            now - WEEK,
            now,
        ];
        let kept = keep(&taken, &r(1, 0, 0, 3), now);
        // This week, last week (its newest of two), the week before.
        assert_eq!(kept, BTreeSet::from([1, 3, 4]));
    }
}
