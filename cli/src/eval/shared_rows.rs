//! The dataset rows of `tests/data/dataset_rows.json` become the requests written there: one
//! file for the CLI's rules and the Python client's (`clients/python/tests/test_dataset_rows.py`
//! reads it too), so the two cannot drift apart unseen. Requests are compared in the proto3
//! JSON mapping, without `id` (the CLI numbers lines, the client names tasks). A row whose
//! `divergent.side` is "cli" pins what the CLI sends today instead, with the reason.

use super::{Format, Recipe, items_of};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use sandpool_proto::v1 as pb;
use serde_json::Value;
use std::collections::HashMap;

const ROWS: &str = include_str!("../../../tests/data/dataset_rows.json");

/// `req` in the proto3 JSON mapping (what `MessageToDict` gives), without its id.
fn proto_json(req: &pb::EvaluateRequest) -> Value {
    let pool = DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let desc = pool
        .get_message_by_name("sandpool.v1.EvaluateRequest")
        .expect("EvaluateRequest");
    let msg = DynamicMessage::decode(desc, req.encode_to_vec().as_slice()).expect("decodes");
    let mut v = serde_json::to_value(&msg).expect("serialises");
    if let Some(o) = v.as_object_mut() {
        o.remove("id");
    }
    v
}

#[test]
fn every_shared_row_becomes_its_request() {
    let rows: Vec<Value> = serde_json::from_str(ROWS).expect("tests/data/dataset_rows.json is JSON");
    assert!(!rows.is_empty());
    let mut wrong = vec![];
    for row in &rows {
        let name = row["name"].as_str().expect("name");
        let format = match row.get("format").and_then(Value::as_str) {
            Some(f) => <Format as clap::ValueEnum>::from_str(f, true).expect("a --format value"),
            None => Format::Auto,
        };
        let recipe = Recipe {
            format,
            language: "python".into(),
            prelude: pb::evaluate_options::Prelude::Unspecified,
        };
        let items = items_of(&row["row"], 1, &HashMap::new(), &recipe).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert_eq!(items.len(), 1, "{name}: one completion per shared row");
        let want = match row.get("divergent") {
            Some(d) if d["side"] == "cli" => &d["request"],
            _ => &row["request"],
        };
        let got = proto_json(&items[0].request);
        if &got != want {
            wrong.push(format!("{name}:\n  got  {got}\n  want {want}"));
        }
    }
    assert!(wrong.is_empty(), "rows the CLI maps otherwise:\n{}", wrong.join("\n"));
}
