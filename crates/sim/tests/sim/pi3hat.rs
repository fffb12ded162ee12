//! The simulated pi3hat's register map, transaction by transaction: versions, timing, the
//! frame registers with their port bits and the 6-slot receive status, the CAN and IMU
//! configuration, the attitude and its "ready" flag, and every malformed transaction the
//! spec names — refused, counted, never a panic.

use proptest::prelude::*;
use rtloop_sim::pi3hat::{
    decode_attitude, reg, CanPortConfig, Pi3hatConfig, RegisterError, SimPi3hat, ATTITUDE_SHORT_LEN,
    CAN_PROTOCOL_VERSION, IMU_PROTOCOL_VERSION,
};
use rtloop_sim::{BusConfig, Imu, Servo, ServoConfig, SimBus};

/// A board with servos `ids` on JC1 (and the same on JC2 with ids + 10), and an IMU.
fn board(cfg: Pi3hatConfig, ids: &[u8]) -> SimPi3hat {
    let mut b = SimPi3hat::new(cfg);
    for (number, offset) in [(1u8, 0u8), (2, 10)] {
        let mut bus = SimBus::new(BusConfig::default());
        for &id in ids {
            bus.add_servo(Servo::new(ServoConfig::new(id + offset)));
        }
        assert!(b.attach_bus(number, bus));
    }
    b.attach_imu(Imu::new(1));
    b
}

/// A register-5 write: a query of the mode from `id`, reply requested, on `port`.
fn query_write(port: u8, id: u8) -> Vec<u8> {
    let payload = [0x11, 0x00];
    let mut w = vec![(port << 7) | payload.len() as u8, 0x80, id];
    w.extend_from_slice(&payload);
    w
}

#[test]
fn versions_and_identity_are_constant() {
    let mut b = board(Pi3hatConfig::default(), &[1]);
    for p in 1..=3u8 {
        let mut v = [0u8; 2];
        assert_eq!(b.read(p, reg::CAN_VERSION, &mut v, 0).result, Ok(()));
        assert_eq!(v, [CAN_PROTOCOL_VERSION, 0], "processor {p}: bytes past the register read as zero");
        let mut t = [0u8; 1];
        b.read(p, reg::INTERFACE_TYPE, &mut t, 0);
        assert_eq!(t, [1]);
        let mut ident = [0u8; 32];
        assert_eq!(b.read(p, reg::IDENT, &mut ident, 0).result, Ok(()));
        assert!(ident.iter().any(|&x| x != 0));
    }
    let mut v = [0u8; 1];
    b.read(3, reg::IMU_VERSION, &mut v, 0);
    assert_eq!(v, [IMU_PROTOCOL_VERSION]);
    // The IMU lives on processor 3 only.
    let mut v = [0xAAu8; 1];
    let t = b.read(1, reg::IMU_VERSION, &mut v, 0);
    assert_eq!(t.result, Err(RegisterError::UnknownRegister { processor: 1, address: reg::IMU_VERSION }));
    assert_eq!(v, [0]);
    assert_eq!(b.stats().unknown_register, 1);
}

#[test]
fn a_transaction_takes_its_spi_time_and_they_never_overlap() {
    let cfg = Pi3hatConfig::default();
    // 2 × 3 µs + 3 µs of holds, then 8 bits of address and 8 per byte at 10 MHz.
    assert_eq!(cfg.transaction_ns(0), 9_000 + 800);
    assert_eq!(cfg.transaction_ns(6), 9_000 + 7 * 800);
    let mut b = board(cfg, &[1]);
    let mut sizes = [0u8; 6];
    let first = b.read(1, reg::RX_STATUS, &mut sizes, 1_000);
    assert_eq!((first.start_ns, first.end_ns), (1_000, 1_000 + cfg.transaction_ns(6)));
    // Asked for before the bus is free: starts when it is.
    let second = b.write(1, reg::TX_ID2, &query_write(0, 1), 1_500);
    assert_eq!(second.start_ns, first.end_ns);
    assert_eq!(second.end_ns - second.start_ns, cfg.transaction_ns(5));
    assert_eq!(b.stats().transactions, 2);
    assert_eq!(b.stats().spi_busy_ns, cfg.transaction_ns(6) + cfg.transaction_ns(5));
    // A slower clock stretches only the bits.
    let slow = Pi3hatConfig { spi_hz: 1_000_000, ..cfg };
    assert_eq!(slow.transaction_ns(6), 9_000 + 7 * 8_000);
}

#[test]
fn a_reply_comes_back_through_status_and_pop_with_its_port() {
    let mut b = board(Pi3hatConfig::default(), &[1]);
    // Servo 11 is on JC2: port 1 of processor 1.
    assert_eq!(b.write(1, reg::TX_ID2, &query_write(0, 1), 0).result, Ok(()));
    assert_eq!(b.write(1, reg::TX_ID2, &query_write(1, 11), 0).result, Ok(()));
    let mut sizes = [0xFFu8; 6];
    b.read(1, reg::RX_STATUS, &mut sizes, 1_000_000);
    let shown: Vec<u8> = sizes.iter().copied().take_while(|&s| s != 0).collect();
    assert_eq!(shown.len(), 2, "{sizes:?}");
    let mut ports = Vec::new();
    for size in shown {
        let mut frame = vec![0u8; usize::from(size)];
        assert_eq!(b.read(1, reg::RX_FRAME, &mut frame, 1_000_000).result, Ok(()));
        let payload_len = usize::from(frame[0] & 0x7f) - 1;
        assert_eq!(usize::from(size), 5 + payload_len, "the status counts the header");
        let id = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]);
        // The answer comes from the servo (source = its id) to the host (destination 0).
        let source = ((id >> 8) & 0x7f) as u8;
        ports.push((frame[0] >> 7, source));
    }
    ports.sort();
    assert_eq!(ports, vec![(0, 1), (1, 11)]);
    // Now empty: the status shows nothing and a pop says so with a zero first byte.
    b.read(1, reg::RX_STATUS, &mut sizes, 1_000_000);
    assert_eq!(sizes, [0; 6]);
    let mut frame = [0xFFu8; 8];
    b.read(1, reg::RX_FRAME, &mut frame, 1_000_000);
    assert_eq!(frame[0], 0);
    assert_eq!(b.stats().frames_sent, 2);
    assert_eq!(b.stats().frames_popped, 2);
}

#[test]
fn the_status_shows_six_frames_and_a_full_queue_loses_and_counts() {
    let ids: Vec<u8> = (1..=8).collect();
    let mut b = board(Pi3hatConfig { rx_queue_capacity: 7, ..Default::default() }, &ids);
    for &id in &ids {
        assert_eq!(b.write(1, reg::TX_ID2, &query_write(0, id), 0).result, Ok(()));
    }
    let mut sizes = [0u8; 8];
    b.read(1, reg::RX_STATUS, &mut sizes, 10_000_000);
    assert!(sizes[..6].iter().all(|&s| s != 0), "{sizes:?}");
    assert_eq!(&sizes[6..], &[0, 0], "only six slots are shown");
    assert_eq!(b.stats().rx_overflow, 1, "8 replies into a queue of 7");
    let mut frame = [0u8; 69];
    for _ in 0..7 {
        b.read(1, reg::RX_FRAME, &mut frame, 10_000_000);
        assert_ne!(frame[0], 0);
    }
    b.read(1, reg::RX_STATUS, &mut sizes, 10_000_000);
    assert_eq!(sizes, [0; 8]);
}

#[test]
fn a_short_pop_still_consumes_the_frame() {
    let mut b = board(Pi3hatConfig::default(), &[1]);
    b.write(1, reg::TX_ID2, &query_write(0, 1), 0);
    let mut head = [0u8; 1];
    b.read(1, reg::RX_FRAME, &mut head, 1_000_000);
    assert_ne!(head[0], 0);
    let mut sizes = [0u8; 6];
    b.read(1, reg::RX_STATUS, &mut sizes, 1_000_000);
    assert_eq!(sizes, [0; 6]);
}

#[test]
fn malformed_transactions_are_refused_counted_and_send_nothing() {
    let mut b = board(Pi3hatConfig::default(), &[1]);
    let cases: Vec<(u8, u8, Vec<u8>, RegisterError)> = vec![
        (1, reg::TX_ID4, vec![], RegisterError::Malformed("empty frame write")),
        (1, reg::TX_ID4, vec![65, 0, 0, 0, 1], RegisterError::Malformed("payload size over 64 bytes")),
        (1, reg::TX_ID2, vec![4, 0x80, 0x01, 0x11], RegisterError::Malformed("fewer bytes than the header's size")),
        (1, reg::TX_ID4, vec![0, 0xFF, 0xFF, 0xFF, 0xFF], RegisterError::Malformed("CAN id wider than 29 bits")),
        (3, reg::TX_ID2, vec![0x80, 0, 1], RegisterError::Malformed("no such port on this processor")),
        (
            3,
            reg::TX_ID2,
            {
                let mut w = vec![12, 0, 1];
                w.extend([0u8; 12]);
                w
            },
            RegisterError::Malformed("more than 8 bytes on a classic CAN port"),
        ),
        (1, reg::CAN_VERSION, vec![9], RegisterError::WrongDirection { processor: 1, address: reg::CAN_VERSION }),
        (
            1,
            reg::SET_CONFIG_PORT0,
            vec![1, 2, 3],
            RegisterError::Malformed("CAN configuration short or with a bit rate that is not positive"),
        ),
        (1, 200, vec![1], RegisterError::UnknownRegister { processor: 1, address: 200 }),
        (0, reg::TX_ID2, query_write(0, 1), RegisterError::NoSuchProcessor(0)),
        (4, reg::TX_ID2, query_write(0, 1), RegisterError::NoSuchProcessor(4)),
        (
            3,
            reg::SET_IMU_CONFIG,
            {
                let mut w = vec![0u8; 12];
                w.extend(300u32.to_le_bytes());
                w
            },
            RegisterError::Malformed("IMU rate not 100/200/400/1000 Hz or angle not finite"),
        ),
        (1, reg::SET_IMU_CONFIG, vec![0; 16], RegisterError::UnknownRegister { processor: 1, address: 36 }),
    ];
    let n = cases.len() as u64;
    for (p, address, bytes, want) in cases {
        assert_eq!(b.write(p, address, &bytes, 0).result, Err(want), "write {address} on {p}: {bytes:?}");
    }
    // Reads of write-only registers.
    let mut out = [0xAAu8; 4];
    assert_eq!(
        b.read(1, reg::TX_ID4, &mut out, 0).result,
        Err(RegisterError::WrongDirection { processor: 1, address: 4 })
    );
    assert_eq!(out, [0; 4], "a refused read returns zeros");
    let s = b.stats();
    assert_eq!(s.malformed + s.wrong_direction + s.unknown_register, n + 1);
    assert_eq!(s.frames_sent, 0);
    assert_eq!(b.bus(1).unwrap().stats().host_frames, 0);
    assert_eq!(b.port_config(1), Some(CanPortConfig::FD_DEFAULT), "a refused configuration changes nothing");
}

#[test]
fn can_configuration_round_trips_and_sets_the_bit_rates() {
    let mut b = board(Pi3hatConfig::default(), &[1]);
    let cfg = CanPortConfig { nominal_bitrate: 500_000, data_bitrate: 2_000_000, ..CanPortConfig::FD_DEFAULT };
    assert_eq!(b.write(1, reg::SET_CONFIG_PORT1, &cfg.encode(), 0).result, Ok(()));
    let mut back = [0u8; rtloop_sim::pi3hat::CAN_CONFIG_LEN];
    b.read(1, reg::CONFIG_PORT1, &mut back, 0);
    assert_eq!(CanPortConfig::decode(&back), Some(cfg));
    assert_eq!(b.bus(2).unwrap().config().data_bitrate, 2_000_000);
    assert_eq!(b.port_config(1), Some(CanPortConfig::FD_DEFAULT), "the other port is untouched");
    // JC5 starts as classic CAN at 125 kbit/s.
    b.read(3, reg::CONFIG_PORT0, &mut back, 0);
    assert_eq!(CanPortConfig::decode(&back), Some(CanPortConfig::SLOW_DEFAULT));
    // Processor 3 has no second port.
    let t = b.read(3, reg::CONFIG_PORT1, &mut back, 0);
    assert_eq!(t.result, Err(RegisterError::UnknownRegister { processor: 3, address: reg::CONFIG_PORT1 }));
}

#[test]
fn the_attitude_is_fresh_once_per_update() {
    let mut b = board(Pi3hatConfig::default(), &[1]);
    let mut ready = [0u8; 2];
    let mut att = [0u8; ATTITUDE_SHORT_LEN];
    b.read(3, reg::READY, &mut ready, 5_000_000);
    assert_eq!(ready[1], 1, "an update since the start");
    b.read(3, reg::ATTITUDE, &mut att, 5_000_000);
    let s = decode_attitude(&att).expect("present");
    let norm: f64 = s.quaternion.iter().map(|q| q * q).sum();
    assert!((norm - 1.0).abs() < 1e-5, "{s:?}");
    b.read(3, reg::READY, &mut ready, 5_100_000);
    assert_eq!(ready[1], 0, "read already, no new update within the millisecond");
    b.read(3, reg::READY, &mut ready, 6_000_000);
    assert_eq!(ready[1], 1, "the next update at 1 kHz");
    // At 100 Hz updates come ten times less often.
    let mut config = vec![0u8; 12];
    config.extend(100u32.to_le_bytes());
    assert_eq!(b.write(3, reg::SET_IMU_CONFIG, &config, 6_000_000).result, Ok(()));
    b.read(3, reg::ATTITUDE, &mut att, 6_000_000);
    b.read(3, reg::READY, &mut ready, 7_000_000);
    assert_eq!(ready[1], 0);
    b.read(3, reg::READY, &mut ready, 20_000_000);
    assert_eq!(ready[1], 1);
    // Not present without an IMU.
    let mut bare = SimPi3hat::new(Pi3hatConfig::default());
    bare.read(3, reg::ATTITUDE, &mut att, 0);
    assert_eq!(decode_attitude(&att), None);
}

proptest! {
    /// Any sequence of transactions, well formed or not: no panic, time only moves forward,
    /// each transaction takes exactly its SPI time, a refused read returns zeros.
    #[test]
    fn any_transactions_never_panic(ops in proptest::collection::vec(
        (0u8..5, any::<u8>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..80), 0u64..200_000),
        0..60,
    )) {
        let cfg = Pi3hatConfig::default();
        let mut b = board(cfg, &[1, 2]);
        let mut now = 0;
        let mut last_end = 0;
        for (p, address, write, bytes, wait) in ops {
            now += wait;
            let t = if write {
                b.write(p, address, &bytes, now)
            } else {
                let mut out = bytes.clone();
                let t = b.read(p, address, &mut out, now);
                if t.result.is_err() {
                    prop_assert!(out.iter().all(|&x| x == 0));
                }
                t
            };
            prop_assert!(t.start_ns >= last_end.max(now));
            prop_assert_eq!(t.end_ns - t.start_ns, cfg.transaction_ns(bytes.len()));
            last_end = t.end_ns;
        }
    }
}
