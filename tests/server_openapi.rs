//! The OpenAPI document served at `/openapi.json` against the real server
//! over loopback: its examples answer as it says, requests generated from
//! its request schemas get only the statuses it lists, with bodies its
//! response schemas accept, and the fields each request object takes are
//! exactly the fields the server accepts (the server names them when it
//! refuses an unknown one). The routes themselves are compared with the
//! router's in the binary's unit tests.
#![cfg(feature = "serve")]

mod common;

use serde_json::{Map, Value, json};

use common::Rng;
use common::http::{Client, Reply};
use common::server::Server;

/// The document as kept in the repository.
fn document() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/bin/simhashdb/serve/openapi.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON")
}

/// `#/components/...` of a `$ref`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("local reference");
            resolve(
                doc,
                doc.pointer(pointer)
                    .unwrap_or_else(|| panic!("no {r} in the document")),
            )
        }
        None => schema,
    }
}

/// Why `value` does not match `schema` (the subset of JSON Schema the
/// document uses), or `None` when it does.
fn invalid(doc: &Value, schema: &Value, value: &Value, at: &str) -> Option<String> {
    let schema = resolve(doc, schema);
    let fail = |why: String| Some(format!("{at}: {why} ({value})"));
    if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
        let fits = branches
            .iter()
            .filter(|b| invalid(doc, b, value, at).is_none())
            .count();
        if fits != 1 {
            return fail(format!("matches {fits} of the oneOf branches, not 1"));
        }
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        return fail(format!("is not {c}"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(value)
    {
        return fail("is not one of the enum".into());
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => panic!("{at}: type {t}"),
        };
        let fits = types.iter().any(|&t| match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_u64() || value.is_i64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            other => panic!("{at}: type {other}"),
        });
        if !fits {
            return fail(format!("is not of type {t}"));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return fail(format!("is below {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return fail(format!("is above {max}"));
        }
    }
    if let (Some(pattern), Some(s)) = (
        schema.get("pattern").and_then(Value::as_str),
        value.as_str(),
    ) {
        // The one pattern the document uses.
        assert_eq!(
            pattern, "^[0-9]{1,20}$",
            "{at}: a pattern this test cannot check"
        );
        if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return fail(format!("does not match {pattern}"));
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for r in required {
                let r = r.as_str().expect("name");
                if !object.contains_key(r) {
                    return fail(format!("lacks the required {r:?}"));
                }
            }
        }
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
            && object.len() as u64 > max
        {
            return fail(format!("has more than {max} properties"));
        }
        for (key, v) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(s) => {
                    if let Some(why) = invalid(doc, s, v, &format!("{at}.{key}")) {
                        return Some(why);
                    }
                }
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return fail(format!("has {key:?}, which the schema does not list"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, v) in array.iter().enumerate() {
            if let Some(why) = invalid(doc, items, v, &format!("{at}[{i}]")) {
                return Some(why);
            }
        }
    }
    None
}

/// The operations of the document: `(method, path, operation)`.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("item") {
            ops.push((method.to_ascii_uppercase(), path.clone(), op.clone()));
        }
    }
    ops
}

/// Checks a reply against the operation's documented responses.
fn check_reply(doc: &Value, method: &str, path: &str, op: &Value, reply: &Reply, sent: &str) {
    let status = reply.status.to_string();
    let response = op["responses"].get(&status).unwrap_or_else(|| {
        panic!(
            "{method} {path} answered {status}, which the document does not list \
             (sent {sent}): {}",
            reply.text()
        )
    });
    let response = resolve(doc, response);
    let content = response["content"].as_object().expect("content");
    let (media, body) = content.iter().next().expect("one media type");
    assert!(
        reply.content_type.starts_with(media.as_str()),
        "{method} {path} {status}: {} is not {media}",
        reply.content_type
    );
    if media == "application/json"
        && let Some(why) = invalid(doc, &body["schema"], &reply.json(), "response")
    {
        panic!("{method} {path} {status} (sent {sent}): {why}");
    }
}

/// A path of the operation with its parameters filled in.
fn concrete_path(path: &str, op: &Value, rng: &mut Rng) -> String {
    let mut path = path.to_string();
    let mut query = Vec::new();
    for p in op["parameters"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().expect("name");
        let value = match rng.below(4) {
            0 => "7".to_string(),
            1 => "https%3A%2F%2Fexample.com%2Fa".to_string(),
            2 => rng.next().to_string(),
            _ => "not%20a%20number".to_string(),
        };
        match p["in"].as_str() {
            Some("path") => path = path.replace(&format!("{{{name}}}"), &value),
            Some("query") => query.push(format!("{name}={value}")),
            other => panic!("parameter in {other:?}"),
        }
    }
    if !query.is_empty() {
        path = format!("{path}?{}", query.join("&"));
    }
    path
}

const TEXT: &str = "Storage engines keep a write-ahead log so that a crash of the process \
                    loses no acknowledged write; on restart they replay it into the memtable.";

/// A value that `schema` describes, chosen at random, sometimes at the
/// edges the server refuses (a blank text, a name over the limit, a
/// distance above k): the document must list those answers too.
fn generate(doc: &Value, schema: &Value, rng: &mut Rng, depth: u32) -> Value {
    let schema = resolve(doc, schema);
    if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
        return generate(doc, &branches[rng.index(branches.len())], rng, depth);
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return e[rng.index(e.len())].clone();
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec!["object"],
    };
    match types[rng.index(types.len())] {
        "null" => Value::Null,
        "boolean" => Value::Bool(rng.below(2) == 0),
        "integer" => {
            let min = schema.get("minimum").and_then(Value::as_u64).unwrap_or(0);
            let choices = [0, 1, 2, 3, 4, 7, 64, 1 << 53, u64::MAX, rng.next()];
            json!(choices[rng.index(choices.len())].max(min))
        }
        "number" => json!(rng.below(100) as f64 / 10.0),
        "string" => {
            if schema.get("pattern").is_some() {
                return json!(rng.next().to_string());
            }
            let choices = [
                TEXT.to_string(),
                TEXT.replace("memtable", "memory table"),
                String::new(),
                "... !".to_string(),
                "a".to_string(),
                "x".repeat(70_000),
                rng.next().to_string(),
            ];
            json!(choices[rng.index(choices.len())])
        }
        "array" => {
            let n = if depth > 3 { 0 } else { rng.below(4) };
            Value::Array(
                (0..n)
                    .map(|_| generate(doc, &schema["items"], rng, depth + 1))
                    .collect(),
            )
        }
        "object" => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut object = Map::new();
            for (key, s) in schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if required.contains(&key.as_str()) || rng.below(2) == 0 {
                    object.insert(key.clone(), generate(doc, s, rng, depth + 1));
                }
            }
            Value::Object(object)
        }
        other => panic!("type {other}"),
    }
}

/// The property names an object schema takes: its own, or those of all
/// its `oneOf` branches (the server parses the union, then tells the forms
/// apart).
fn property_names(doc: &Value, schema: &Value) -> Vec<String> {
    let schema = resolve(doc, schema);
    let mut names: Vec<String> = match schema.get("oneOf").and_then(Value::as_array) {
        Some(branches) => branches
            .iter()
            .filter(|b| resolve(doc, b).get("type") != Some(&json!("null")))
            .flat_map(|b| property_names(doc, b))
            .collect(),
        None => schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default(),
    };
    names.sort();
    names.dedup();
    names
}

/// The schema of the object at `pointer` in a request whose body schema is
/// `schema`, following properties and array items.
fn schema_at<'a>(doc: &'a Value, schema: &'a Value, pointer: &[String]) -> &'a Value {
    let schema = resolve(doc, schema);
    let Some((first, rest)) = pointer.split_first() else {
        return schema;
    };
    // Through a oneOf: the branch that is an array or lists the property.
    let candidates: Vec<&Value> = match schema.get("oneOf").and_then(Value::as_array) {
        Some(b) => b.iter().map(|b| resolve(doc, b)).collect(),
        None => vec![schema],
    };
    for s in candidates {
        if let Some(items) = s.get("items")
            && first.parse::<usize>().is_ok()
        {
            return schema_at(doc, items, rest);
        }
        if let Some(p) = s.get("properties").and_then(|p| p.get(first)) {
            return schema_at(doc, p, rest);
        }
    }
    panic!("no schema for {first}");
}

/// The JSON pointers of every object in `value`, as segments.
fn objects(value: &Value, at: Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) => {
            out.push(at.clone());
            for (k, v) in map {
                let mut next = at.clone();
                next.push(k.clone());
                objects(v, next, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let mut next = at.clone();
                next.push(i.to_string());
                objects(v, next, out);
            }
        }
        _ => {}
    }
}

/// The fields serde lists in "unknown field `x`, expected one of `a`, `b`"
/// (or "expected `a`" for one).
fn expected_fields(message: &str) -> Vec<String> {
    let rest = message
        .split("expected ")
        .nth(1)
        .unwrap_or_else(|| panic!("no field list in {message:?}"));
    let mut names: Vec<String> = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

fn seeded(server: &Server) {
    let mut client = server.client();
    let body = json!({"documents": [
        {"id": 7, "fingerprint": "9671253489062817316", "name": "doc 7"},
        {"name": "https://example.com/a", "text": TEXT},
    ]});
    let reply = client
        .post("/v1/documents", body.to_string().as_bytes())
        .expect("seed");
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[test]
fn the_served_document_is_the_kept_one_and_needs_no_token() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let token = tmp.path().join("token");
    std::fs::write(&token, "t0ken\n").expect("token");
    let server = Server::start(
        &tmp.path().join("index"),
        &["--token-file", token.to_str().expect("utf-8")],
    );
    let mut client = server.client();
    let reply = client.get("/openapi.json").expect("get");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.content_type, "application/json");
    assert_eq!(reply.json(), document());
    let doc = document();
    let (_, _, op) = operations(&doc)
        .into_iter()
        .find(|(m, p, _)| m == "GET" && p == "/")
        .expect("GET /");
    let reply = client.get("/").expect("get /");
    check_reply(&doc, "GET", "/", &op, &reply, "nothing");
    assert_eq!(reply.json()["version"], env!("CARGO_PKG_VERSION"));
    // The API itself still needs the token.
    assert_eq!(client.get("/v1/stats").expect("stats").status, 401);
}

#[test]
fn every_example_answers_as_the_document_says() {
    let doc = document();
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&tmp.path().join("index"), &[]);
    seeded(&server);
    let mut client = server.client();
    let mut rng = Rng(1);
    let mut examples = 0;
    for (method, path, op) in operations(&doc) {
        let bodies: Vec<Value> = match op.pointer("/requestBody/content/application~1json/examples")
        {
            Some(e) => e
                .as_object()
                .expect("examples")
                .values()
                .map(|e| e["value"].clone())
                .collect(),
            None => vec![Value::Null],
        };
        for mut body in bodies {
            if let Some(dest) = body.get_mut("path") {
                // A backup's destination: a fresh one in the test's directory.
                *dest = json!(tmp.path().join(format!("backup-{examples}")));
            }
            let concrete = concrete_path(&path, &op, &mut rng);
            let reply = if body.is_null() {
                client.request(&method, &concrete, None, b"")
            } else {
                examples += 1;
                client.request(
                    &method,
                    &concrete,
                    Some("application/json"),
                    body.to_string().as_bytes(),
                )
            }
            .expect("request");
            check_reply(&doc, &method, &path, &op, &reply, &body.to_string());
            if !body.is_null() {
                assert_eq!(
                    reply.status,
                    200,
                    "the example of {method} {path} is refused: {}",
                    reply.text()
                );
            }
        }
    }
    assert!(examples >= 7, "{examples} examples");
}

#[test]
fn every_request_object_takes_exactly_the_documented_fields() {
    let doc = document();
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&tmp.path().join("index"), &[]);
    let mut client = server.client();
    let mut checked = 0;
    for (method, path, op) in operations(&doc) {
        let Some(content) = op.pointer("/requestBody/content/application~1json") else {
            continue;
        };
        for example in content["examples"].as_object().expect("examples").values() {
            let example = &example["value"];
            let mut pointers = Vec::new();
            objects(example, Vec::new(), &mut pointers);
            for pointer in pointers {
                let schema = schema_at(&doc, &content["schema"], &pointer);
                let mut body = example.clone();
                let target = if pointer.is_empty() {
                    &mut body
                } else {
                    body.pointer_mut(&format!("/{}", pointer.join("/")))
                        .expect("pointer")
                };
                target
                    .as_object_mut()
                    .expect("object")
                    .insert("no_such_field".into(), json!(1));
                let reply = client
                    .request(
                        &method,
                        &path,
                        Some("application/json"),
                        body.to_string().as_bytes(),
                    )
                    .expect("request");
                check_reply(&doc, &method, &path, &op, &reply, &body.to_string());
                assert_eq!(
                    reply.status,
                    400,
                    "{method} {path} {body}: {}",
                    reply.text()
                );
                let message = reply.json()["error"]["message"]
                    .as_str()
                    .expect("message")
                    .to_string();
                assert!(
                    message.contains("unknown field `no_such_field`")
                        || message.contains("takes no arguments"),
                    "{method} {path} /{}: {message}",
                    pointer.join("/")
                );
                let documented = property_names(&doc, schema);
                if documented.is_empty() {
                    assert!(message.contains("takes no arguments"), "{message}");
                } else {
                    assert_eq!(
                        expected_fields(&message),
                        documented,
                        "{method} {path} /{}: the server takes other fields than the document lists",
                        pointer.join("/")
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "{checked} objects checked");
}

#[test]
fn generated_requests_get_documented_answers() {
    let doc = document();
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&tmp.path().join("index"), &[]);
    seeded(&server);
    let mut client = server.client();
    let mut rng = Rng(0x0A1);
    let mut statuses = std::collections::BTreeMap::new();
    for (method, path, op) in operations(&doc) {
        let rounds = if op.get("requestBody").is_some() || op.get("parameters").is_some() {
            150
        } else {
            2
        };
        for _ in 0..rounds {
            if op.get("parameters").is_some() {
                // The documents the parameters name, deleted by earlier rounds.
                seeded(&server);
            }
            let concrete = concrete_path(&path, &op, &mut rng);
            let body = op
                .pointer("/requestBody/content/application~1json/schema")
                .map(|s| generate(&doc, s, &mut rng, 0));
            let reply = match &body {
                Some(b) => client.request(
                    &method,
                    &concrete,
                    Some("application/json"),
                    b.to_string().as_bytes(),
                ),
                None => client.request(&method, &concrete, None, b""),
            }
            .expect("request");
            let sent = body.map_or(String::new(), |b| {
                let s = b.to_string();
                s.chars().take(300).collect()
            });
            check_reply(&doc, &method, &path, &op, &reply, &sent);
            *statuses
                .entry((method.clone(), path.clone(), reply.status))
                .or_insert(0) += 1;
        }
    }
    // The generator reached both answers of the endpoints that take input.
    for (method, path) in [
        ("POST", "/v1/check"),
        ("POST", "/v1/documents"),
        ("POST", "/v1/query"),
        ("GET", "/v1/documents/{id}"),
    ] {
        for status in [200, 400] {
            assert!(
                statuses.contains_key(&(method.to_string(), path.to_string(), status)),
                "no {status} for {method} {path}: {statuses:?}"
            );
        }
    }
}

#[test]
fn a_client_reads_the_document_and_uses_it() {
    // What a generated client does: find the check operation's path and its
    // example in the served document, and post it.
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&tmp.path().join("index"), &[]);
    let mut client: Client = server.client();
    let served = client.get("/openapi.json").expect("get").json();
    let (path, item) = served["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .find(|(_, item)| item.pointer("/post/operationId") == Some(&json!("check")))
        .expect("a check operation");
    let example =
        &item["post"]["requestBody"]["content"]["application/json"]["examples"]["text"]["value"];
    let first = client
        .post(path, example.to_string().as_bytes())
        .expect("post")
        .json();
    assert_eq!(first["results"][0]["status"], "new", "{first}");
    let again = client
        .post(path, example.to_string().as_bytes())
        .expect("post")
        .json();
    assert_eq!(again["results"][0]["status"], "duplicate", "{again}");
}
