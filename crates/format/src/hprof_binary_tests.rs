//! Tests of the HPROF binary writer and reader.

use super::hprof_binary::*;

fn sample_records(id_size: u32, constant_pool: bool) -> (Vec<Item>, Vec<u8>) {
    let big = if id_size == 8 {
        0x1234_5678_9abc_def0
    } else {
        0x9abc_def0
    };
    let records = vec![
        Record::Utf8 {
            id: big,
            text: b"Keep$Node".to_vec(),
        },
        Record::LoadClass {
            class_serial: 1,
            class_id: 0x100,
            stack_serial: 300000,
            name_id: big,
        },
        Record::StackFrame {
            frame_id: 7,
            method_name_id: big,
            signature_id: big,
            source_id: big,
            class_serial: 1,
            line: -3,
        },
        Record::StackTrace {
            stack_serial: 300001,
            thread_serial: 200001,
            frames: vec![7, 7],
        },
        Record::AllocSites {
            flags: 3,
            cutoff: 0.0001,
            total_live_bytes: 10,
            total_live_instances: 1,
            total_allocated_bytes: 1 << 40,
            total_allocated_instances: 9,
            sites: vec![AllocSite {
                array_type: 10,
                class_serial: 1,
                stack_serial: 300001,
                live_bytes: 56,
                live_instances: 1,
                allocated_bytes: 560,
                allocated_instances: 10,
            }],
        },
        Record::HeapSummary {
            live_bytes: 1,
            live_instances: 2,
            allocated_bytes: 3,
            allocated_instances: 4,
        },
        Record::StartThread {
            thread_serial: 200001,
            object_id: 0x200,
            stack_serial: 300000,
            name_id: big,
            group_name_id: big,
            parent_group_name_id: 0,
        },
        Record::CpuSamples {
            total: 9,
            traces: vec![(9, 300001)],
        },
        Record::ControlSettings { flags: 2, depth: 4 },
        Record::UnloadClass { class_serial: 1 },
        Record::EndThread {
            thread_serial: 200001,
        },
    ];
    let subs = vec![
        SubRecord::RootUnknown { id: 1 },
        SubRecord::RootJniGlobal {
            id: 2,
            global_ref_id: 3,
        },
        SubRecord::RootJniLocal {
            id: 4,
            thread_serial: 200001,
            frame: 0,
        },
        SubRecord::RootJavaFrame {
            id: 5,
            thread_serial: 200001,
            frame: u32::MAX,
        },
        SubRecord::RootNativeStack {
            id: 6,
            thread_serial: 200001,
        },
        SubRecord::RootStickyClass { id: 0x100 },
        SubRecord::RootThreadBlock {
            id: 8,
            thread_serial: 200001,
        },
        SubRecord::RootMonitorUsed { id: 9 },
        SubRecord::RootThreadObject {
            id: 0x200,
            thread_serial: 200001,
            stack_serial: 300000,
        },
        SubRecord::ClassDump(Box::new(ClassDump {
            class_id: 0x100,
            stack_serial: 300000,
            super_id: 0x101,
            loader_id: 0,
            signers_id: 0,
            protection_domain_id: 0,
            instance_size: 16,
            // HotSpot writes no constant pool (and jvm-hprof refuses one); ours round-trips it.
            constant_pool: if constant_pool {
                vec![(
                    1,
                    Value {
                        basic_type: BasicType::Int,
                        bytes: vec![0, 0, 0, 7],
                    },
                )]
            } else {
                Vec::new()
            },
            static_fields: vec![
                (
                    big,
                    Value {
                        basic_type: BasicType::Object,
                        bytes: vec![0; id_size as usize],
                    },
                ),
                (
                    big,
                    Value {
                        basic_type: BasicType::Long,
                        bytes: vec![1; 8],
                    },
                ),
            ],
            instance_fields: vec![(big, BasicType::Int), (big, BasicType::Object)],
        })),
        SubRecord::InstanceDump {
            id: 0x300,
            stack_serial: 300001,
            class_id: 0x100,
            values: vec![0; 4 + id_size as usize],
        },
        SubRecord::ObjectArrayDump {
            id: 0x301,
            stack_serial: 300001,
            class_id: 0x102,
            elements: vec![0x300, 0, big],
        },
        SubRecord::PrimitiveArrayDump {
            id: 0x302,
            stack_serial: 300001,
            element_type: BasicType::Char,
            length: 3,
            bytes: b"\0a\0b\0c".to_vec(),
        },
    ];
    let mut writer = HprofWriter::new(Vec::new(), id_size, 1_795_318_001_000)
        .unwrap()
        .with_segment_limit(40);
    let mut expected = Vec::new();
    for record in &records {
        writer.record(record).unwrap();
        expected.push(Item::Record(record.clone()));
    }
    for sub in &subs {
        writer.sub_record(sub).unwrap();
    }
    let bytes = writer.finish().unwrap();
    // Reading gives back the records, then segments of the sub-records in order, then the end.
    let read: Vec<Item> = HprofReader::new(bytes.as_slice())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let subs_read: Vec<SubRecord> = read
        .iter()
        .filter_map(|item| match item {
            Item::Sub(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(subs_read, subs);
    assert!(
        read.iter()
            .filter(|i| matches!(i, Item::HeapDumpStart { segment: true }))
            .count()
            > 1,
        "cut into segments"
    );
    assert_eq!(read.last(), Some(&Item::HeapDumpEnd));
    (expected, bytes)
}

#[test]
fn every_record_round_trips_with_both_identifier_sizes() {
    for id_size in [4, 8] {
        let (expected, bytes) = sample_records(id_size, true);
        let reader = HprofReader::new(bytes.as_slice()).unwrap();
        assert_eq!(reader.header().format, FORMAT_1_0_2);
        assert_eq!(reader.header().id_size, id_size);
        assert_eq!(reader.header().millis, 1_795_318_001_000);
        let records: Vec<Item> = reader
            .filter_map(Result::ok)
            .filter(|i| matches!(i, Item::Record(_)))
            .collect();
        assert_eq!(records, expected);
    }
}

#[test]
fn a_parser_not_written_here_reads_what_we_write() {
    let (_, bytes) = sample_records(8, false);
    let hprof = jvm_hprof::parse_hprof(&bytes).expect("jvm-hprof parses the header");
    let mut tags = Vec::new();
    let mut instances = 0;
    let mut primitive_arrays = 0;
    for record in hprof.records_iter() {
        let record = record.expect("jvm-hprof parses every record");
        tags.push(format!("{:?}", record.tag()));
        if let Some(segment) = record.as_heap_dump_segment() {
            for sub in segment.expect("a segment").sub_records() {
                match sub.expect("a sub-record") {
                    jvm_hprof::heap_dump::SubRecord::Instance(_) => instances += 1,
                    jvm_hprof::heap_dump::SubRecord::PrimitiveArray(_) => primitive_arrays += 1,
                    _ => {}
                }
            }
        }
        if let Some(utf8) = record.as_utf_8() {
            assert_eq!(utf8.unwrap().text(), b"Keep$Node");
        }
    }
    assert_eq!((instances, primitive_arrays), (1, 1));
    assert!(tags.iter().any(|t| t.contains("HeapDumpEnd")), "{tags:?}");
}

#[test]
fn truncated_and_corrupt_files_are_errors_with_offsets_never_panics() {
    let (_, bytes) = sample_records(8, true);
    let all: Vec<Item> = HprofReader::new(bytes.as_slice())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for cut in 0..bytes.len() {
        let result: Result<Vec<Item>, HprofError> =
            HprofReader::new(&bytes[..cut]).and_then(|reader| reader.collect());
        match result {
            Err(HprofError::Malformed { offset, .. }) => {
                assert!(offset <= cut as u64, "cut {cut}: offset {offset}")
            }
            Err(other) => panic!("cut {cut}: {other}"),
            // A cut exactly between two records is a shorter, whole file.
            Ok(items) => assert_eq!(items[..], all[..items.len()], "cut {cut}"),
        }
    }
    let mut corrupt = bytes.clone();
    corrupt[36] = 0xFF; // the high byte of the first record's length
    let error = HprofReader::new(corrupt.as_slice())
        .unwrap()
        .find_map(Result::err)
        .expect("refused");
    assert!(error.to_string().starts_with("byte "), "{error}");
    assert!(HprofReader::new(&b"JAVA PROFILE 1.0.2\0\0\0\0\x05"[..]).is_err());
    assert!(HprofReader::new(&b"GIF89a"[..]).is_err());
}

#[test]
fn error_offsets_stay_inside_the_input() {
    // Found by the fuzzer: a heap dump segment whose sub-record claims more than the file holds.
    let data: &[u8] = &[
        74, 65, 86, 65, 32, 80, 82, 79, 70, 73, 76, 69, 32, 49, 46, 210, 48, 46, 50, 0, 0, 0, 0, 8,
        0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 64, 0, 17, 0, 0, 0, 0, 2, 10, 0, 0, 0, 0, 0, 0,
        1, 75, 101, 101, 112, 36, 78, 111, 100, 101, 2, 0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0, 1, 0, 0,
        0, 0, 7, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        194, 0, 0, 55, 33, 0, 64, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 101, 0, 0, 1, 0, 0, 0, 0,
        0, 0, 0, 0,
    ];
    let error = HprofReader::new(data)
        .unwrap()
        .find_map(Result::err)
        .expect("refused");
    match error {
        HprofError::Malformed {
            offset,
            ref message,
        } => {
            assert!(
                offset <= data.len() as u64,
                "offset {offset} past {} bytes: {message}",
                data.len()
            )
        }
        other => panic!("{other}"),
    }
}
