//! Pod IPs: one loopback address per Pod, so every etcd can listen on the
//! standard ports 2379/2380/2381 without colliding.
//!
//! Addresses are drawn at random from 127.20.0.0 – 127.29.255.254 (the whole
//! of 127.0.0.0/8 reaches the loopback interface on Linux) and kept unique
//! process-wide. Other processes on the machine may use loopback addresses
//! too, so an address is taken only if the etcd ports on it are free.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Mutex;

use anyhow::{Result, bail};

static IN_USE: Mutex<Option<HashSet<Ipv4Addr>>> = Mutex::new(None);

/// The ports an etcd member listens on by convention.
pub const ETCD_PORTS: [u16; 3] = [2379, 2380, 2381];

/// Takes a fresh Pod IP; give it back with [`release`].
pub fn allocate() -> Result<Ipv4Addr> {
    let mut guard = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
    let in_use = guard.get_or_insert_with(HashSet::new);
    for _ in 0..200 {
        let r = uuid::Uuid::new_v4().as_u128();
        let ip = Ipv4Addr::new(
            127,
            20 + (r % 10) as u8,
            (r >> 8) as u8,
            1 + ((r >> 16) % 254) as u8,
        );
        if in_use.contains(&ip) || !ports_free(ip) {
            continue;
        }
        in_use.insert(ip);
        return Ok(ip);
    }
    bail!("no free loopback address found for a Pod in 127.20.0.0/14 after 200 tries")
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
    fn addresses_are_unique_until_released() {
        let a: Vec<_> = (0..50).map(|_| allocate().unwrap()).collect();
        let set: HashSet<_> = a.iter().collect();
        assert_eq!(set.len(), a.len());
        for ip in &a {
            assert!(
                ip.octets()[0] == 127 && (20..30).contains(&ip.octets()[1]),
                "{ip}"
            );
            release(*ip);
        }
    }

    #[test]
    fn an_address_with_a_busy_etcd_port_is_skipped() {
        let ip = allocate().unwrap();
        let _busy = TcpListener::bind((ip, 2380)).unwrap();
        assert!(!ports_free(ip));
        release(ip);
    }
}
