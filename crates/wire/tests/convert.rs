//! Conversions: message ids and positions, ack sets and acked batch indexes, metadata to
//! `cursor::EntryMeta`.

mod common;

use cursor::{ChunkMeta, Position};
use wire::convert::{
    ack_request, ack_set_from_acked, acked_indexes_from_ack_set, batch_index, batch_size,
    merge_ack_sets, message_id, message_info, position, unacked_indexes_from_ack_set, AckRequest,
    MetadataError,
};
use wire::decode_frame;
use wire::proto::{MessageIdData, MessageMetadata};

#[test]
fn message_ids_and_positions() {
    let p = Position::new(7, 42);
    let id = message_id(p);
    assert_eq!((id.ledger_id, id.entry_id), (7, 42));
    assert_eq!(
        (id.partition, id.batch_index, id.batch_size),
        (None, None, None)
    );
    assert!(id.ack_set.is_empty());
    assert_eq!(position(&id), p);
    // Defaults from the proto: partition and batch index -1.
    assert_eq!((id.partition(), id.batch_index()), (-1, -1));

    let batched = MessageIdData {
        batch_index: Some(3),
        batch_size: Some(5),
        ..id.clone()
    };
    assert_eq!(position(&batched), p);
    assert_eq!(
        (batch_index(&batched), batch_size(&batched)),
        (Some(3), Some(5))
    );
    let none = MessageIdData {
        batch_index: Some(-1),
        batch_size: Some(0),
        ..id
    };
    assert_eq!((batch_index(&none), batch_size(&none)), (None, None));
}

#[test]
fn ack_set_polarity_matches_the_stock_client() {
    // Acking indexes 0 and 2 of a 5-message batch sends ack_set [26] = 0b11010.
    assert_eq!(ack_set_from_acked(&[0, 2], 5), vec![26]);
    assert_eq!(acked_indexes_from_ack_set(&[26], 5), vec![0, 2]);
    assert_eq!(unacked_indexes_from_ack_set(&[26], 5), vec![1, 3, 4]);
    // The client rebuilt its bitmap from all ones and acked 1, 3, 4: ack_set 5 = {0, 2} unacked.
    assert_eq!(ack_set_from_acked(&[1, 3, 4], 5), vec![5]);
    // AND-merge: nothing left unacked, so the entry is complete.
    assert_eq!(merge_ack_sets(&[26], &[5]), Vec::<i64>::new());
    assert_eq!(merge_ack_sets(&[26], &[31]), vec![26]);
}

#[test]
fn ack_sets_edge_cases() {
    // Nothing acked: every bit set; everything acked: no words (BitSet.toLongArray trims).
    assert_eq!(ack_set_from_acked(&[], 5), vec![31]);
    assert_eq!(ack_set_from_acked(&[0, 1, 2, 3, 4], 5), Vec::<i64>::new());
    assert_eq!(ack_set_from_acked(&[], 0), Vec::<i64>::new());
    // An empty ack set acks the whole entry.
    assert_eq!(acked_indexes_from_ack_set(&[], 3), vec![0, 1, 2]);
    // Indexes past the batch are ignored both ways.
    assert_eq!(ack_set_from_acked(&[9], 3), vec![7]);
    assert_eq!(acked_indexes_from_ack_set(&[-1], 3), Vec::<u32>::new());

    // 64 bits and beyond: word i/64, bit i%64, sign bit included.
    let all: Vec<u32> = (0..130).collect();
    assert_eq!(ack_set_from_acked(&[], 64), vec![-1]);
    assert_eq!(ack_set_from_acked(&[], 65), vec![-1, 1]);
    let set = ack_set_from_acked(&[63, 64], 130);
    assert_eq!(set, vec![i64::MAX, -2, 3]);
    assert_eq!(acked_indexes_from_ack_set(&set, 130), vec![63, 64]);
    let not: Vec<u32> = all
        .iter()
        .copied()
        .filter(|i| ![63, 64].contains(i))
        .collect();
    assert_eq!(unacked_indexes_from_ack_set(&set, 130), not);
    // Trailing words vanish once all their indexes are acked.
    let acked_high: Vec<u32> = (128..130).collect();
    assert_eq!(ack_set_from_acked(&acked_high, 130), vec![-1, -1]);
    // Merge with different lengths: missing words are zero.
    assert_eq!(merge_ack_sets(&[-1, -1, 3], &[-1]), vec![-1]);
}

#[test]
fn ack_sets_round_trip_for_every_subset_of_small_batches() {
    for n in 0..=10u32 {
        for mask in 0u32..(1 << n) {
            let acked: Vec<u32> = (0..n).filter(|i| mask >> i & 1 == 1).collect();
            let set = ack_set_from_acked(&acked, n);
            assert_eq!(
                acked_indexes_from_ack_set(&set, n),
                acked,
                "n {n} mask {mask:b}"
            );
        }
    }
}

#[test]
fn metadata_of_the_golden_sends() {
    let frames = common::golden_frames();
    let p5 = decode_frame(&frames[4]).unwrap().payload.unwrap();
    let i5 = p5.info().unwrap();
    assert_eq!(i5.meta.partition_key.as_deref(), Some("k1"));
    assert!(!i5.meta.partition_key_b64);
    assert_eq!(i5.meta.ordering_key, None);
    assert_eq!((i5.meta.size, i5.meta.num_messages), (5, 1));
    assert_eq!(i5.meta.producer_name.as_deref(), Some("fake-1-0"));
    assert_eq!(i5.meta.sequence_id, Some(0));
    assert_eq!(i5.meta.publish_time, p5.metadata.publish_time);
    assert_eq!((i5.meta.chunk.clone(), i5.meta.deliver_at), (None, None));

    let p6 = decode_frame(&frames[5]).unwrap().payload.unwrap();
    let i6 = p6.info().unwrap();
    assert_eq!(i6.meta.ordering_key.as_deref(), Some(&b"ok1"[..]));
    assert_eq!(i6.meta.partition_key, None);
    assert_eq!(i6.meta.sequence_id, Some(1));
}

fn meta() -> MessageMetadata {
    MessageMetadata {
        producer_name: "fake-1-0".into(),
        sequence_id: 0,
        publish_time: 1_000,
        ..Default::default()
    }
}

#[test]
fn batches_chunks_and_delays() {
    let m = MessageMetadata {
        num_messages_in_batch: Some(5),
        partition_key: Some("a2I=".into()),
        partition_key_b64_encoded: Some(true),
        deliver_at_time: Some(5_000),
        event_time: Some(0),
        highest_sequence_id: Some(4),
        ..meta()
    };
    let i = message_info(&m, 100).unwrap();
    assert_eq!((i.meta.num_messages, i.meta.size), (5, 100));
    assert!(i.meta.partition_key_b64);
    assert_eq!(
        (i.meta.deliver_at, i.event_time, i.highest_sequence_id),
        (Some(5_000), None, Some(4))
    );

    for bad in [0, -3] {
        let m = MessageMetadata {
            num_messages_in_batch: Some(bad),
            deliver_at_time: Some(-1),
            ..meta()
        };
        let i = message_info(&m, 1).unwrap();
        assert_eq!((i.meta.num_messages, i.meta.deliver_at), (1, None));
    }

    // The chunk fields the C++ client sends for a 25 600-byte message in 3 chunks.
    let m = MessageMetadata {
        uuid: Some("fake-1-0-0".into()),
        num_chunks_from_msg: Some(3),
        total_chunk_msg_size: Some(25_600),
        chunk_id: Some(2),
        ..meta()
    };
    assert_eq!(
        message_info(&m, 5_166).unwrap().meta.chunk,
        Some(ChunkMeta {
            uuid: "fake-1-0-0".into(),
            chunk_id: 2,
            num_chunks: 3,
            total_size: 25_600
        })
    );
    for m in [
        MessageMetadata {
            chunk_id: Some(3),
            ..m.clone()
        },
        MessageMetadata {
            chunk_id: Some(-1),
            ..m.clone()
        },
        MessageMetadata {
            uuid: None,
            ..m.clone()
        },
        MessageMetadata {
            total_chunk_msg_size: Some(-1),
            ..m.clone()
        },
    ] {
        assert!(matches!(
            message_info(&m, 1),
            Err(MetadataError::InvalidChunk { .. })
        ));
    }
}

#[test]
fn ack_requests() {
    let p = Position::new(1, 0);
    let mut id = message_id(p);
    id.batch_index = Some(2); // a batch index alone acks the whole entry, as in Pulsar
    assert_eq!(ack_request(&id, 5), AckRequest::Entry(p));
    id.ack_set = vec![26];
    assert_eq!(
        ack_request(&id, 5),
        AckRequest::BatchIndexes {
            position: p,
            batch_size: 5,
            acked: vec![0, 2]
        }
    );
    // An ack_set that leaves nothing unacked completes the entry.
    id.ack_set = vec![0b100000];
    assert_eq!(ack_request(&id, 5), AckRequest::Entry(p));
    // One that acks nothing is an empty batch-index ack.
    id.ack_set = vec![31];
    assert_eq!(
        ack_request(&id, 5),
        AckRequest::BatchIndexes {
            position: p,
            batch_size: 5,
            acked: vec![]
        }
    );
}
