//! A policy receives its settings as JSON text (the WIT contract passes a
//! string, so any language can parse it its own way); files write them as a
//! YAML mapping, the same shape as `spec.statusPolicy.settings`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub fn empty() -> String {
    "{}".to_owned()
}

pub fn serialize<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    // Text that is not a JSON object never came from a file; show it as the
    // string it is rather than fail.
    match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text) {
        Ok(map) => map.serialize(s),
        Err(_) => s.serialize_str(text),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
    Ok(serde_json::Value::Object(map).to_string())
}
