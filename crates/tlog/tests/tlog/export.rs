//! Exports: CSV rows and header, MCAP that the mcap crate reads back, a PNG plot.

use rtloop_tlog::export::{to_csv, to_mcap};
use rtloop_tlog::plot::{plot, PlotOptions};
use rtloop_tlog::reader::FileReader;
use rtloop_tlog::writer::{FileWriter, WriterOptions};
use serde::Serialize;

#[derive(Serialize, Default)]
struct Joint {
    position: f64,
    torque: f32,
}

#[derive(Serialize, Default)]
struct Status {
    mode: u8,
    label: String,
    servo: [Joint; 2],
    #[serde(serialize_with = "rtloop_tlog::schema::typed_vec")]
    extra: Vec<i32>,
}

#[derive(Serialize, Default)]
struct Command {
    target: f64,
}

const START_US: i64 = 1_650_000_000_000_000;

fn build_log() -> FileReader {
    let mut writer = FileWriter::new(Vec::new(), WriterOptions::default()).unwrap();
    let status = writer.register::<Status>("status").unwrap();
    let command = writer.register::<Command>("command").unwrap();
    for i in 0..250 {
        let t = START_US + i * 10_000;
        let value = Status {
            mode: (i % 3) as u8,
            label: if i == 1 { "a,\"b\"".into() } else { format!("l{i}") },
            servo: [
                Joint { position: i as f64 * 0.01, torque: 0.5 },
                Joint { position: -(i as f64), torque: f32::NAN },
            ],
            extra: (0..(i % 3) as i32).collect(),
        };
        writer.write(&status, t, &value).unwrap();
        if i % 5 == 0 {
            writer.write(&command, t, &Command { target: i as f64 }).unwrap();
        }
    }
    FileReader::from_bytes(writer.close().unwrap()).unwrap()
}

#[test]
fn csv_has_a_header_and_one_row_per_item() {
    let reader = build_log();
    let mut out = Vec::new();
    let bar = indicatif::ProgressBar::hidden();
    let stats = to_csv(&reader, "status", &mut out, Some(&bar)).unwrap();
    assert_eq!(stats.rows, 250);
    // Items 1.. have a longer `extra` than the first: their extra values have no column,
    // and that is counted, not silent.
    assert_eq!(stats.problems.len(), 1, "{:?}", stats.problems);
    assert_eq!(stats.problems[0].kind, rtloop_tlog::survey::ProblemKind::ValuesWithoutColumn);
    assert_eq!(stats.problems[0].count, 166);
    assert_eq!(stats.skipped(), 0);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 251);
    // The first item has an empty `extra`, so later items' extra.N have no column.
    assert_eq!(lines[0], "timestamp,mode,label,servo.0.position,servo.0.torque,servo.1.position,servo.1.torque");
    assert_eq!(lines[1], "1650000000.000000,0,l0,0,0.5,0,NaN");
    assert!(lines[2].starts_with("1650000000.010000,1,\"a,\"\"b\"\"\",0.01,"));
    assert!(lines.iter().skip(1).all(|l| l.starts_with("16500000")));

    let mut out = Vec::new();
    assert_eq!(to_csv(&reader, "command", &mut out, None).unwrap().rows, 50);
    assert!(String::from_utf8(out).unwrap().starts_with("timestamp,target\n1650000000.000000,0\n"));

    let error = to_csv(&reader, "nope", Vec::new(), None).unwrap_err().to_string();
    assert!(error.contains("nope") && error.contains("status") && error.contains("command"), "{error}");
}

#[test]
fn mcap_reads_back_with_the_right_messages() {
    let reader = build_log();
    let mut out = std::io::Cursor::new(Vec::new());
    let stats = to_mcap(&reader, &mut out, None).unwrap();
    assert_eq!(stats.channels, 2);
    assert_eq!(stats.messages, 300);
    assert_eq!(stats.skipped, 0);
    let bytes = out.into_inner();
    let mut per_topic = std::collections::BTreeMap::<String, u64>::new();
    let mut last_time = 0;
    for message in mcap::MessageStream::new(&bytes).unwrap() {
        let message = message.unwrap();
        assert_eq!(message.channel.message_encoding, "json");
        let schema = message.channel.schema.as_ref().unwrap();
        assert_eq!(schema.encoding, "jsonschema");
        let json_schema: serde_json::Value = serde_json::from_slice(&schema.data).unwrap();
        assert_eq!(json_schema["type"], "object");
        let body: serde_json::Value = serde_json::from_slice(&message.data).unwrap();
        if message.channel.topic == "status" {
            assert!(json_schema["properties"]["servo"]["items"]["properties"]["position"]["type"] == "number");
            assert!(body["servo"][1]["torque"].is_null(), "NaN is written as null");
        }
        assert!(message.log_time >= START_US as u64 * 1000);
        assert!(message.log_time >= last_time);
        last_time = message.log_time;
        assert_eq!(message.publish_time, message.log_time);
        *per_topic.entry(message.channel.topic.clone()).or_default() += 1;
    }
    assert_eq!(per_topic.get("status"), Some(&250));
    assert_eq!(per_topic.get("command"), Some(&50));
}

#[test]
fn plot_writes_a_png_and_names_unknown_fields() {
    let reader = build_log();
    let options = PlotOptions { size: (640, 400), one_axis: false };
    let mut png = Vec::new();
    let stats =
        plot(&reader, &["status.servo.0.position", "command.target", "status.mode"], &options, &mut png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(stats.points, [250, 50, 250]);
    assert!(stats.problems.is_empty());

    let error = plot(&reader, &["status.servo.9.position"], &options, Vec::new()).unwrap_err().to_string();
    assert!(error.contains("status.servo.9.position") && error.contains("status.servo.0.position"), "{error}");
    let error = plot(&reader, &["bogus.x"], &options, Vec::new()).unwrap_err().to_string();
    assert!(error.contains("bogus.x") && error.contains("status"), "{error}");
    let big = PlotOptions { size: (100_000, 400), one_axis: false };
    let error = plot(&reader, &["command.target"], &big, Vec::new()).unwrap_err().to_string();
    assert!(error.contains("100000") && error.contains("8192"), "{error}");
}
