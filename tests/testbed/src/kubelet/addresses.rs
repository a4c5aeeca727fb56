//! Pod IPs: one address per Pod, so every etcd can listen on the standard
//! ports 2379/2380/2381 without colliding.
//!
//! Under `scripts/in-namespace.sh` the tests run in a network namespace of
//! their own, whose loopback interface holds a local route for a private
//! /16 (`ETCD_STEWARD_POD_NETWORK`, 10.244.0.0/16): every address in it
//! reaches that namespace's loopback and nothing else, and the API server
//! accepts it in Endpoints and EndpointSlices, which it refuses for
//! loopback addresses. Without that variable (the sandbox, which shares the
//! machine's network so that `kubectl` from another shell reaches it),
//! addresses come from 127.20.0.0 – 127.29.255.254: the whole of
//! 127.0.0.0/8 reaches the loopback interface on Linux.
//!
//! Addresses are drawn at random and kept unique process-wide. Other
//! processes may use addresses in the range too, so an address is taken
//! only if the etcd ports on it are free.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Mutex;

use anyhow::{Result, bail};

static IN_USE: Mutex<Option<HashSet<Ipv4Addr>>> = Mutex::new(None);

/// The ports an etcd member listens on by convention.
pub const ETCD_PORTS: [u16; 3] = [2379, 2380, 2381];

/// Set by `scripts/in-namespace.sh` to the /16 its network namespace routes
/// to loopback, e.g. `10.244.0.0/16`.
pub const POD_NETWORK_ENV: &str = "ETCD_STEWARD_POD_NETWORK";

/// Where Pod IPs come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Range {
    /// a.b.0.0/16, routed to loopback in the tests' network namespace.
    Private([u8; 2]),
    /// 127.20.0.0 – 127.29.255.255.
    Loopback,
}

impl Range {
    fn from_env() -> Result<Self> {
        match std::env::var(POD_NETWORK_ENV) {
            Ok(cidr) => Self::parse(&cidr),
            Err(_) => Ok(Range::Loopback),
        }
    }

    fn parse(cidr: &str) -> Result<Self> {
        let parsed = cidr
            .strip_suffix("/16")
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok());
        match parsed {
            Some(ip) if ip.octets()[2..] == [0, 0] && ip.is_private() => {
                let [a, b, _, _] = ip.octets();
                Ok(Range::Private([a, b]))
            }
            _ => bail!("{POD_NETWORK_ENV}={cidr:?}: expected a private a.b.0.0/16"),
        }
    }

    fn pick(self, r: u128) -> Ipv4Addr {
        let third = (r >> 8) as u8;
        let fourth = 1 + ((r >> 16) % 254) as u8;
        match self {
            Range::Private([a, b]) => Ipv4Addr::new(a, b, third, fourth),
            Range::Loopback => Ipv4Addr::new(127, 20 + (r % 10) as u8, third, fourth),
        }
    }
}

/// Takes a fresh Pod IP; give it back with [`release`].
pub fn allocate() -> Result<Ipv4Addr> {
    let range = Range::from_env()?;
    let mut guard = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
    let in_use = guard.get_or_insert_with(HashSet::new);
    for _ in 0..200 {
        let ip = range.pick(uuid::Uuid::new_v4().as_u128());
        if in_use.contains(&ip) || !ports_free(ip) {
            continue;
        }
        in_use.insert(ip);
        return Ok(ip);
    }
    match range {
        Range::Private(_) => bail!(
            "no free Pod address found in {} after 200 tries: is this process inside \
             scripts/in-namespace.sh, whose network namespace routes it to loopback?",
            std::env::var(POD_NETWORK_ENV).unwrap_or_default()
        ),
        Range::Loopback => {
            bail!("no free loopback address found for a Pod in 127.20.0.0/14 after 200 tries")
        }
    }
}

pub fn release(ip: Ipv4Addr) {
    if let Some(set) = IN_USE.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        set.remove(&ip);
    }
}

fn ports_free(ip: Ipv4Addr) -> bool {
    ETCD_PORTS
        .iter()
        .all(|&p| TcpListener::bind(SocketAddr::from((ip, p))).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_unique_until_released_and_in_the_range() {
        let range = Range::from_env().unwrap();
        let a: Vec<_> = (0..50).map(|_| allocate().unwrap()).collect();
        let set: HashSet<_> = a.iter().collect();
        assert_eq!(set.len(), a.len());
        for ip in &a {
            let [a, b, _, d] = ip.octets();
            match range {
                Range::Private(net) => assert_eq!([a, b], net, "{ip}"),
                Range::Loopback => assert!(a == 127 && (20..30).contains(&b), "{ip}"),
            }
            assert!((1..255).contains(&d), "{ip}");
            release(*ip);
        }
    }

    #[test]
    fn the_pod_network_must_be_a_private_slash_16() {
        assert_eq!(
            Range::parse("10.244.0.0/16").unwrap(),
            Range::Private([10, 244])
        );
        for bad in [
            "10.244.0.0/24",
            "10.244.1.0/16",
            "8.8.0.0/16",
            "10.244.0.0",
            "x",
        ] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Range::Private([10, 244]).pick(0x0304_0500).octets()[..2],
            [10, 244]
        );
    }

    #[test]
    fn an_address_with_a_busy_etcd_port_is_skipped() {
        let ip = allocate().unwrap();
        let _busy = TcpListener::bind((ip, 2380)).unwrap();
        assert!(!ports_free(ip));
        release(ip);
    }
}
