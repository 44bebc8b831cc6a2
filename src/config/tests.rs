//! Tests for tools.toml parsing: whole-config comparisons and exact error lines.

use super::*;

fn errors(text: &str) -> Vec<String> {
    match parse(text, Path::new("tools.toml")) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn explore() {
    let cases = [
        "a = [",
        "[defaults]\ntimout = \"8s\"\nattempts = \"3\"\ntimeout = \"8 parsecs\"\nbackoff = 5",
        "[tools.x]\ndescription = 5\nhttp = { mehtod = \"GET\" }\n",
        "[tools.x]\ndescription = \"d\"\n[tools.x.http]\nmehtod = \"GET\"\n",
        "[tools.x]\ndescription = \"d\"\ncommand = [\"a\"]\nfallback = [{ map = {} }]\n",
        "[tools.x]\ndescription = \"d\"\ncommand = [\"a\"]\ninput_schema = { type = \"object\", properties = { q = { type = \"strin\" } } }\n",
        "[tools.x]\ndescription = \"d\"\ncommand = [\"a\"]\ninput_schema = { type = \"object\", \"$ref\" = \"http://example.com/s.json\" }\n",
        "[tools.x]\ndescription = \"d\"\ncommand = [\"a\"]\ninput_schema = { type = \"object\", \"$schema\" = \"http://example.com/s.json\" }\n",
        "tools = 3",
        "[tools]\nx = 3",
    ];
    for c in cases {
        println!("---- {c:?}");
        for e in errors(c) {
            println!("{e}");
        }
    }
}

#[test]
fn spans() {
    let text = "[tools.x]\ndescription = \"d\"\n[tools.x.http]\nmehtod = \"GET\"\n";
    let doc = toml::de::DeTable::parse(text).unwrap().into_inner();
    let tools = doc.get("tools").unwrap();
    println!("tools {:?}", tools.span());
    let toml::de::DeValue::Table(t) = tools.get_ref() else { panic!() };
    let x = t.get("x").unwrap();
    println!("x {:?}", x.span());
    let toml::de::DeValue::Table(t) = x.get_ref() else { panic!() };
    for (k, v) in t.iter() { println!("{:?} {:?} {:?}", k.get_ref(), k.span(), v.span()); }
}
