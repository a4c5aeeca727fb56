//! etcd member IDs are u64, written in hex as etcdctl prints them
//! (`8e9e05c52164694d`). Case files write them as hex strings only: a bare
//! YAML number is refused rather than guessed at, since `10` could mean
//! ten or sixteen.

use serde::{Deserialize, Deserializer, Serializer, de};

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Number(u64),
    Text(String),
}

fn parse(raw: Raw) -> Result<u64, String> {
    match raw {
        Raw::Number(n) => Err(format!(
            "member IDs are hex strings, as etcdctl prints them, and {n} is a YAML number: \
             write \"{n}\" if those are hex digits, or \"{n:x}\" for the number {n}"
        )),
        Raw::Text(s) => {
            let hex = s.strip_prefix("0x").unwrap_or(&s);
            if hex.is_empty() || hex.len() > 16 {
                return Err(format!("member ID {s:?} is not 1 to 16 hex digits"));
            }
            u64::from_str_radix(hex, 16).map_err(|_| format!("member ID {s:?} is not hex"))
        }
    }
}

pub fn serialize<S: Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{id:x}"))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    parse(Raw::deserialize(d)?).map_err(de::Error::custom)
}

/// The JSON Schema of a member ID in a case file.
#[cfg(feature = "testing")]
pub struct Hex;

#[cfg(feature = "testing")]
impl schemars::JsonSchema for Hex {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MemberId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An etcd member ID in hex, as etcdctl prints it (quote IDs that look like numbers)",
            "type": "string",
            "pattern": "^(0x)?[0-9a-fA-F]{1,16}$",
        })
    }
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

pub mod list {
    use super::*;

    pub fn serialize<S: Serializer>(ids: &[u64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(ids.iter().map(|id| format!("{id:x}")))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        Vec::<Raw>::deserialize(d)?
            .into_iter()
            .map(parse)
            .collect::<Result<_, _>>()
            .map_err(de::Error::custom)
    }
}
