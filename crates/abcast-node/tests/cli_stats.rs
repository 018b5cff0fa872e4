//! The stats-line contract (docs/CONTRACTS.md) from the parent's side: a well-formed line
//! parses, anything else is an error for that line and never a panic.

use abcast_node::stats::{LineKind, parse_line};

const GOOD: &str = r#"{"type":"stats","node":1,"incarnation":0,"t_us":1234567,"delivered_values":10,"delivered_bytes":10240,"delivered_instance":3,"order_hash":"0123abcd0123abcd","proposed_values":5,"acked_values":4,"busy_rejections":0,"coordinator":0,"cpu_user_ms":12,"cpu_sys_ms":3,"rss_kib":4096,"lat_count":4,"lat_us_p50":120,"lat_us_p99":400,"lat_us_p999":410,"delivered_by_origin":{"0":6,"1":4},"acked_by_origin":{"1":4},"duplicate_deliveries":0}"#;

#[test]
fn the_contract_example_parses() {
    let line = parse_line(GOOD).expect("the contract's own example parses");
    assert_eq!(line.kind, LineKind::Stats);
    assert_eq!(line.node, 1);
    assert_eq!(line.delivered_by_origin.get(&0), Some(&6));
    let fin = parse_line(&GOOD.replace("\"stats\"", "\"final\"")).expect("final parses");
    assert_eq!(fin.kind, LineKind::Final);
}

#[test]
fn malformed_lines_are_errors_not_panics() {
    let cut = &GOOD[..GOOD.len() - 10];
    let garbage: Vec<String> = vec![
        String::new(),
        "   ".into(),
        "starting node 1".into(),
        "null".into(),
        "42".into(),
        "{\"type\":\"stats\"}".into(),
        cut.into(),
        GOOD.replace("\"type\":\"stats\"", "\"type\":7"),
        GOOD.replace("\"t_us\":1234567", "\"t_us\":-1"),
        GOOD.replace("\"rss_kib\":4096", "\"rss_kib\":1e400"),
        GOOD.replace(
            "\"order_hash\":\"0123abcd0123abcd\"",
            "\"order_hash\":\"0123abcd0123abcd0\"",
        ),
        GOOD.replace("{\"1\":4}", "{\"x\":4}"),
        GOOD.replace("\"lat_us_p99\":400", "\"lat_us_p99\":-400"),
        String::from_utf8_lossy(&[0xff, 0xfe, b'{', 0x00]).into_owned(),
        "{".repeat(10_000),
    ];
    for g in &garbage {
        assert!(parse_line(g).is_err(), "accepted garbage: {g:.80}");
    }
}
