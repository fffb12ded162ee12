//! The SocketCAN transport: frame conversion to and from the `socketcan` crate's types
//! (pure, runs everywhere), and helpful open errors. Kernels without SocketCAN (no PF_CAN
//! sockets) skip the parts that need a socket, saying so on stderr.

use proptest::prelude::*;
use rtloop_io::socketcan::{from_socketcan, kernel_supports_socketcan, to_socketcan, SocketCanTransport};
use rtloop_io::TransportError;
use rtloop_proto::frame::{FrameFlags, DLC_LENGTHS};
use rtloop_proto::CanFdFrame;
use socketcan::{CanAnyFrame, EmbeddedFrame, Id};

fn frame(id: u32, payload: &[u8], flags: FrameFlags) -> CanFdFrame {
    let mut f = CanFdFrame::new(id, payload).unwrap();
    f.flags = flags;
    f
}

#[test]
fn open_of_a_missing_interface_says_what_to_do() {
    let e = SocketCanTransport::open("nosuchcan0").err().expect("nosuchcan0 must not open");
    assert_eq!(e.uri, "socketcan:nosuchcan0");
    let msg = e.to_string();
    match kernel_supports_socketcan() {
        Err(why) => {
            rtloop_testkit::skip(&format!("needs a kernel with CAN-FD SocketCAN (modprobe can_raw vcan): {why}"));
            assert!(msg.contains("this kernel has no SocketCAN support"), "{msg}");
            assert!(msg.contains("modprobe can_raw"), "{msg}");
            assert!(msg.contains("fdcanusb:") && msg.contains("udp:"), "{msg}");
        }
        Ok(()) => {
            assert!(msg.contains("no CAN interface named nosuchcan0"), "{msg}");
            assert!(msg.contains("ip link show"), "{msg}");
        }
    }
}

#[test]
fn a_non_can_interface_is_refused_by_name() {
    if let Err(why) = kernel_supports_socketcan() {
        rtloop_testkit::skip(&format!("needs a kernel with CAN-FD SocketCAN (modprobe can_raw vcan): {why}"));
        return;
    }
    // The loopback interface exists everywhere and is not CAN.
    let msg = SocketCanTransport::open("lo").err().expect("lo is not CAN").to_string();
    assert!(msg.contains("lo is not a CAN interface"), "{msg}");
}

#[test]
fn moteus_frames_become_extended_fd_frames_with_brs() {
    let query = CanFdFrame::new(0x8001, &[0x11, 0x00, 0x1f, 0x01, 0x13, 0x0d, 0x50, 0x50]).unwrap();
    let CanAnyFrame::Fd(out) = to_socketcan(&query).unwrap() else { panic!("not an FD frame") };
    assert!(out.is_extended());
    assert!(out.is_brs());
    assert_eq!(out.id(), Id::Extended(socketcan::ExtendedId::new(0x8001).unwrap()));
    assert_eq!(out.data(), query.payload());
    assert_eq!(from_socketcan(&CanAnyFrame::Fd(out)), Some(query));
}

#[test]
fn lengths_between_can_fd_sizes_are_padded_with_the_nop_byte() {
    let f = CanFdFrame::new(0x8001, &[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap();
    let CanAnyFrame::Fd(out) = to_socketcan(&f).unwrap() else { panic!("not an FD frame") };
    assert_eq!(out.data(), &[1, 2, 3, 4, 5, 6, 7, 8, 9, 0x50, 0x50, 0x50]);
}

#[test]
fn small_ids_use_the_standard_format_unless_flagged_extended() {
    let fd = FrameFlags { fd: true, brs: true, ..Default::default() };
    let std_frame = frame(0x123, &[1], fd);
    let CanAnyFrame::Fd(out) = to_socketcan(&std_frame).unwrap() else { panic!() };
    assert!(!out.is_extended());
    let ext = frame(0x123, &[1], FrameFlags { extended: true, ..fd });
    let CanAnyFrame::Fd(out) = to_socketcan(&ext).unwrap() else { panic!() };
    assert!(out.is_extended());
    assert_eq!(from_socketcan(&CanAnyFrame::Fd(out)), Some(ext));
}

#[test]
fn classic_and_remote_frames_round_trip() {
    let classic = frame(0x7FF, &[1, 2, 3, 4, 5, 6, 7, 8], FrameFlags::default());
    let any = to_socketcan(&classic).unwrap();
    assert!(matches!(any, CanAnyFrame::Normal(_)));
    assert_eq!(from_socketcan(&any), Some(classic));

    let mut remote = frame(0x1234_5678, &[], FrameFlags { extended: true, remote: true, ..Default::default() });
    remote.len = 4;
    let any = to_socketcan(&remote).unwrap();
    assert!(matches!(any, CanAnyFrame::Remote(_)));
    assert_eq!(from_socketcan(&any), Some(remote));
}

#[test]
fn frames_no_bus_can_carry_are_refused_with_a_reason() {
    let long_classic = frame(1, &[0; 9], FrameFlags::default());
    assert!(matches!(to_socketcan(&long_classic), Err(TransportError::Protocol(_))));
    let mut wide = CanFdFrame::new(1, &[]).unwrap();
    wide.id = 0x2000_0000;
    assert!(matches!(to_socketcan(&wide), Err(TransportError::Protocol(_))));
    let mut huge = CanFdFrame::new(1, &[]).unwrap();
    huge.len = 65;
    assert!(matches!(to_socketcan(&huge), Err(TransportError::Protocol(_))));
}

proptest! {
    #[test]
    fn fd_frames_of_valid_lengths_round_trip(
        id in 0u32..=0x1FFF_FFFF,
        len_index in 0usize..16,
        bytes in prop::collection::vec(any::<u8>(), 64),
        brs in any::<bool>(),
        extended_flag in any::<bool>(),
    ) {
        let len = DLC_LENGTHS[len_index] as usize;
        let extended = extended_flag || id > 0x7FF;
        let f = frame(id, &bytes[..len], FrameFlags { extended, fd: true, brs, remote: false });
        let back = from_socketcan(&to_socketcan(&f).unwrap());
        prop_assert_eq!(back, Some(f));
    }

    #[test]
    fn classic_frames_round_trip(id in 0u32..=0x1FFF_FFFF, bytes in prop::collection::vec(any::<u8>(), 0..=8)) {
        let f = frame(id, &bytes, FrameFlags { extended: id > 0x7FF, ..Default::default() });
        prop_assert_eq!(from_socketcan(&to_socketcan(&f).unwrap()), Some(f));
    }
}
