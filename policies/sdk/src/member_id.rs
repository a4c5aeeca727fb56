//! etcd member IDs are u64, usually printed in hex (`8e9e05c52164694d`).
//! YAML files may give either a number or a hex string; output is hex.

use serde::{Deserialize, Deserializer, Serializer, de};

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Number(u64),
    Text(String),
}

fn parse(raw: Raw) -> Result<u64, String> {
    match raw {
        Raw::Number(n) => Ok(n),
        Raw::Text(s) => {
            let hex = s.strip_prefix("0x").unwrap_or(&s);
            u64::from_str_radix(hex, 16)
                .map_err(|_| format!("member ID {s:?} is neither a number nor hex"))
        }
    }
}

pub fn serialize<S: Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{id:x}"))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    parse(Raw::deserialize(d)?).map_err(de::Error::custom)
}

pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(id: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => super::serialize(id, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<Raw>::deserialize(d)?
            .map(parse)
            .transpose()
            .map_err(de::Error::custom)
    }
}
